//! `mesh bench auto`: `model: "auto"` against always the small model and always the large one, on
//! labelled questions ([`super::questions`]).
//!
//! One mesh (a core node, a regional node) serves SmolLM2 on the pod (the small model) and Gemma 3 270M
//! on `llama-server` (the large one), both as text completions, with the registry's prices of
//! `--small-price` and `--large-price`. Every request skips the cache (`no-store, no-cache`), so each is
//! generated. The confidence bar is learned on the calibration half: one tenant per candidate bar
//! (`--auto-tenant-min-confidence`), each asked every calibration question through `auto`; the learned
//! bar is the cheapest whose accuracy is within `--accuracy-margin` of always-large's (the most accurate
//! when none is). The frozen test half is then asked of the three arms, and each arm's accuracy and cost
//! per question are printed. An escalated auto answer costs both generations: the small model's
//! (as the always-small arm measured it on the same prompt; greedy decoding gives the same tokens) and
//! the large one's.

use std::path::{Path, PathBuf};

use mesh_harness::client::ChatClient;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::{json, Value};
use shared::auto_model::{self, Candidate};
use shared::model_spec::ModelSpec;
use shared::models::ModelRef;
use shared::normalize::{ChatRole, Message};

use super::questions::{questions, Question, Split};
use crate::bench::common::report::{cpu_model, Machine};
use crate::bench::common::scratch::run_kept;
use crate::gemma::{GemmaServer, GEMMA_MODEL};

/// The small model (the pod's).
const SMALL: &str = "smollm2-135m-instruct";
/// The candidate confidence bars, one calibration tenant each.
const BARS: [f32; 6] = [0.2, 0.35, 0.5, 0.65, 0.8, 0.95];
/// Tokens per answer (one word or number, then the newline that stops it).
const MAX_TOKENS: u32 = 8;

/// What `mesh bench auto` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct AutoBenchOptions {
    /// Price of the small model's tokens (prompt and generated), dollars per million tokens.
    #[arg(long, default_value = "0.1")]
    pub small_price: String,
    /// Price of the large model's tokens, dollars per million tokens.
    #[arg(long, default_value = "1.0")]
    pub large_price: String,
    /// The learned bar is the cheapest whose calibration accuracy is at least always-large's minus this.
    #[arg(long, default_value_t = 0.02)]
    pub accuracy_margin: f64,
    /// llama-server's threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Directory of llama-server (default: where scripts/install-llama-cpp.sh builds).
    #[arg(long, env = "LLAMA_CPP_BIN_DIR")]
    pub llama_bin_dir: Option<PathBuf>,
    /// Where the run keeps its data and logs (removed after a successful run).
    #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
    pub dir: PathBuf,
}

/// One arm's answers to a list of questions.
#[derive(Clone, Debug, Default)]
struct Arm {
    /// Per question: right, the model that answered, micro-dollars.
    answers: Vec<(bool, String, f64)>,
}

impl Arm {
    fn accuracy(&self) -> f64 {
        self.answers.iter().filter(|a| a.0).count() as f64 / self.answers.len().max(1) as f64
    }

    fn cost_per_question(&self) -> f64 {
        self.answers.iter().map(|a| a.2).sum::<f64>() / self.answers.len().max(1) as f64
    }

    fn answered_by(&self, model: &str) -> usize {
        self.answers.iter().filter(|a| a.1 == model).count()
    }
}

/// Prices in micro-dollars per token.
#[derive(Clone, Copy, Debug)]
struct Prices {
    small: f64,
    large: f64,
}

impl Prices {
    /// What `reply` cost (its usage at its model's price).
    fn of(&self, reply: &Value) -> f64 {
        let tokens = reply["usage"]["prompt_tokens"].as_f64().unwrap_or(0.0)
            + reply["usage"]["completion_tokens"].as_f64().unwrap_or(0.0);
        tokens * if reply["model"] == SMALL { self.small } else { self.large }
    }
}

/// Runs the suite: prints the tables and returns the figures as JSON.
pub fn run(options: &AutoBenchOptions) -> anyhow::Result<Value> {
    run_kept(&options.dir, "auto", |scratch| run_in(options, scratch))
}

fn run_in(options: &AutoBenchOptions, dir: &Path) -> anyhow::Result<Value> {
    let per_token = |price: &str| -> anyhow::Result<f64> {
        Ok(shared::model_spec::parse_usd_per_mtok(price).map_err(anyhow::Error::msg)? as f64 / 1e6)
    };
    let prices = Prices { small: per_token(&options.small_price)?, large: per_token(&options.large_price)? };
    let gemma = GemmaServer::start(options.llama_bin_dir.as_deref(), options.threads, &dir.join("logs"))?;
    eprintln!("{GEMMA_MODEL} on {} at {}", gemma.label(), gemma.url());
    let registry = dir.join("models.toml");
    std::fs::write(
        &registry,
        format!(
            "[models.{SMALL}]\napis = [\"chat\", \"completions\"]\ninput_cost_per_mtok = \"{s}\"\noutput_cost_per_mtok = \"{s}\"\n\
             [models.{GEMMA_MODEL}]\napis = [\"completions\"]\ninput_cost_per_mtok = \"{l}\"\noutput_cost_per_mtok = \"{l}\"\n",
            s = options.small_price,
            l = options.large_price
        ),
    )?;
    let tenants: Vec<(String, String)> =
        (0..BARS.len()).map(|i| (format!("bar-{i}"), format!("sk-bar-{i}"))).collect();
    let bars: Vec<String> = tenants.iter().zip(BARS).map(|((t, _), bar)| format!("{t}={bar}")).collect();
    let spec = MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        other_tenants: tenants.clone(),
        core_args: vec![
            "--model-registry".into(),
            registry.display().to_string(),
            "--auto-tenant-min-confidence".into(),
            bars.join(","),
        ],
        ..MeshSpec::local(dir.join("mesh"))
    };
    let mesh = Mesh::start(gemma.add_to(spec))?;
    let client = |key: &str| ChatClient::new(&mesh.regional_url(0), Some(key));
    let dev = mesh.regional_client(0);
    wait_until_served(&dev)?;

    let calibration = questions(Split::Calibration);
    eprintln!("calibration: {} questions, always-small and always-large", calibration.len());
    let small_cal = ask_all(&dev, SMALL, &calibration, &prices, None)?;
    let large_cal = ask_all(&dev, GEMMA_MODEL, &calibration, &prices, None)?;
    let mut swept = Vec::new();
    for (i, bar) in BARS.iter().enumerate() {
        eprintln!("calibration: auto with the bar at {bar}");
        swept.push(ask_all(&client(&tenants[i].1), "auto", &calibration, &prices, Some(&small_cal))?);
    }
    let target = large_cal.accuracy() - options.accuracy_margin;
    let within: Vec<usize> = (0..BARS.len()).filter(|&i| swept[i].accuracy() >= target - 1e-9).collect();
    let learned = match within
        .iter()
        .min_by(|&&a, &&b| swept[a].cost_per_question().total_cmp(&swept[b].cost_per_question()))
    {
        Some(&i) => i,
        None => {
            (0..BARS.len()).max_by(|&a, &b| swept[a].accuracy().total_cmp(&swept[b].accuracy())).unwrap_or(0)
        }
    };

    let test = questions(Split::Test);
    eprintln!("test: {} questions, three arms (the bar learned: {})", test.len(), BARS[learned]);
    let small_test = ask_all(&dev, SMALL, &test, &prices, None)?;
    let large_test = ask_all(&dev, GEMMA_MODEL, &test, &prices, None)?;
    let auto_test = ask_all(&client(&tenants[learned].1), "auto", &test, &prices, Some(&small_test))?;

    let machine = Machine::current();
    println!("\nmachine: {} ({} cores, {} GiB)", cpu_model(), machine.cores, machine.mem_gib);
    println!(
        "small: {SMALL} (pod) at ${}/Mtok; large: {GEMMA_MODEL} ({}) at ${}/Mtok; text completions, 3 examples of the question's kind then the question, max_tokens {MAX_TOKENS}, greedy",
        options.small_price,
        gemma.label(),
        options.large_price
    );
    println!(
        "\ncalibration ({} questions): always-small {:.3}, always-large {:.3}",
        calibration.len(),
        small_cal.accuracy(),
        large_cal.accuracy()
    );
    println!("| bar | accuracy | cost/question micro-$ | answered by large |");
    println!("|---|---|---|---|");
    for (i, arm) in swept.iter().enumerate() {
        let mark = if i == learned { " (learned)" } else { "" };
        println!(
            "| {}{mark} | {:.3} | {:.3} | {} of {} |",
            BARS[i],
            arm.accuracy(),
            arm.cost_per_question(),
            arm.answered_by(GEMMA_MODEL),
            arm.answers.len()
        );
    }
    println!("\ntest ({} questions, frozen, never tuned on):", test.len());
    println!("| arm | accuracy | cost/question micro-$ | answered by large |");
    println!("|---|---|---|---|");
    for (name, arm) in [("always-small", &small_test), ("always-large", &large_test), ("auto", &auto_test)] {
        println!(
            "| {name} | {:.3} | {:.3} | {} of {} |",
            arm.accuracy(),
            arm.cost_per_question(),
            arm.answered_by(GEMMA_MODEL),
            arm.answers.len()
        );
    }
    let accuracy_gap = (auto_test.accuracy() - large_test.accuracy()) * 100.0;
    let cost_ratio = auto_test.cost_per_question() / large_test.cost_per_question().max(1e-12);
    let met = accuracy_gap >= -2.0 && cost_ratio <= 0.5;
    println!(
        "auto against always-large: accuracy {accuracy_gap:+.1} points, cost x{cost_ratio:.3} (goal: at least -2 points at x0.5 or less: {})",
        if met { "met" } else { "not met" }
    );
    for kind in ["arithmetic", "conversion", "capital", "yes/no"] {
        let right = |arm: &Arm| test.iter().zip(&arm.answers).filter(|(q, a)| q.kind == kind && a.0).count();
        let count = test.iter().filter(|q| q.kind == kind).count();
        println!(
            "  {kind}: small {} / large {} / auto {} right of {count}",
            right(&small_test),
            right(&large_test),
            right(&auto_test)
        );
    }
    let figures = |arm: &Arm| json!({"accuracy": arm.accuracy(), "cost_per_question_micro_usd": arm.cost_per_question(), "answered_by_large": arm.answered_by(GEMMA_MODEL)});
    Ok(json!({
        "learned_bar": BARS[learned],
        "calibration": {"small": figures(&small_cal), "large": figures(&large_cal),
                        "bars": BARS.iter().zip(&swept).map(|(b, a)| json!({"bar": b, "arm": figures(a)})).collect::<Vec<_>>()},
        "test": {"small": figures(&small_test), "large": figures(&large_test), "auto": figures(&auto_test)},
        "accuracy_gap_points": accuracy_gap,
        "cost_ratio": cost_ratio,
        "goal_met": met,
    }))
}

/// Waits until both models answer text completions through the mesh.
fn wait_until_served(client: &ChatClient) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for model in [SMALL, GEMMA_MODEL] {
        loop {
            let body = json!({"model": model, "prompt": "1, 2, 3,", "max_tokens": 2, "temperature": 0});
            let reply = client.post_json("/v1/completions", &body)?;
            if reply.status == 200 {
                break;
            }
            anyhow::ensure!(std::time::Instant::now() < deadline, "{model} is not served: {}", reply.body);
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }
    Ok(())
}

/// Asks every question of `model` through `client`, skipping the cache. For `auto`, an answer of the
/// large model that the rule started on the small one also pays for the small one's generation, as
/// `small` measured it.
fn ask_all(
    client: &ChatClient,
    model: &str,
    questions: &[Question],
    prices: &Prices,
    small: Option<&Arm>,
) -> anyhow::Result<Arm> {
    let mut arm = Arm::default();
    for (i, question) in questions.iter().enumerate() {
        let body = json!({"model": model, "prompt": question.prompt(), "max_tokens": MAX_TOKENS,
                          "temperature": 0, "stop": ["\n"]});
        let reply = client.post_json_with_headers(
            "/v1/completions",
            &body,
            &[("cache-control", "no-store, no-cache")],
        )?;
        anyhow::ensure!(reply.status == 200, "{question}: {} {}", reply.status, reply.body);
        let json = reply.json();
        let text = json["choices"][0]["text"].as_str().unwrap_or_default().to_owned();
        let answered_by = json["model"].as_str().unwrap_or_default().to_owned();
        let mut cost = prices.of(&json);
        if let Some(small) = small {
            if answered_by != SMALL && starts_small(question) {
                cost += small.answers.get(i).map_or(0.0, |a| a.2);
            }
        }
        arm.answers.push((question.is_right(&text), answered_by, cost));
    }
    Ok(arm)
}

/// Whether the rule starts `question` on the small model (two models, neither over budget).
fn starts_small(question: &Question) -> bool {
    let messages = [Message { role: ChatRole::User, content: question.prompt() }];
    let ladder: Vec<Candidate> = [SMALL, GEMMA_MODEL]
        .iter()
        .map(|name| Candidate {
            model: ModelRef { name: (*name).into(), version: 1 },
            spec: Some(ModelSpec::default()),
        })
        .collect();
    let ask = auto_model::Ask {
        messages: &messages,
        max_tokens: MAX_TOKENS,
        time_sensitive: false,
        budget_micro_usd: None,
    };
    auto_model::plan(&ladder, &ask).rungs.first().is_some_and(|m| m.name == SMALL)
}
