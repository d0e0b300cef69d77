//! The pod's peer, llama.cpp (vendored in the llama-cpp-python 0.3.36 sdist): where its binaries are, the
//! installer that builds them when they are missing (`scripts/install-llama-cpp.sh`, into a cache directory
//! outside the repository), and `llama-bench`'s prefill and decode figures. The server is in
//! [`crate::bench::pod::ours::llama_server`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde::Deserialize;

use mesh_harness::process::ManagedProcess;

/// The llama-cpp-python release whose vendored llama.cpp the installer builds.
pub const LLAMA_CPP_PYTHON_VERSION: &str = "0.3.36";

/// A llama.cpp build: the directory holding `llama-bench` and `llama-server`.
#[derive(Clone, Debug)]
pub struct LlamaCpp {
    /// The binaries' directory.
    bin_dir: PathBuf,
    /// How the report names it, e.g. `llama.cpp b7123` or `llama.cpp (llama-cpp-python 0.3.36)`.
    label: String,
}

/// Where the installer puts the build: `LLAMA_CPP_DIR`, else
/// `${XDG_CACHE_HOME:-$HOME/.cache}/llm-cache-mesh/llama.cpp-0.3.36` (the same rule as the script).
pub fn default_install_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LLAMA_CPP_DIR") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into())).join(".cache")
    });
    cache.join("llm-cache-mesh").join(format!("llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"))
}

/// The installer script, from the repository root.
pub fn installer() -> PathBuf {
    mesh_harness::paths::repo_root().join("scripts/install-llama-cpp.sh")
}

/// llama.cpp's settings that change its speed, pinned (never left to a default that moves between
/// versions) and the same for `llama-bench` and `llama-server`: flash attention on, an f16 KV cache, a
/// logical batch of 2,048 and a physical (micro) batch of 512 tokens.
pub const PINNED_SETTINGS: [&str; 10] =
    ["-fa", "on", "-ctk", "f16", "-ctv", "f16", "-b", "2048", "-ub", "512"];

impl LlamaCpp {
    /// The binaries in `bin_dir` (default: the installer's). With `install` and the installer's
    /// directory, the installer runs first (it returns at once when the build is there and was made for
    /// this machine's instruction sets; else about 12 min on 2 cores, logged to `log_dir`); without
    /// `install`, missing binaries fail with the command to run. The build is then run once on a tiny
    /// prompt: a build that dies there (a CPU that lists AMX without granting it to ggml's threads) is
    /// made again without AMX, and the report says so.
    pub fn locate(
        bin_dir: Option<&Path>,
        install: bool,
        log_dir: &Path,
        stop: &AtomicBool,
    ) -> anyhow::Result<Self> {
        let own_build = bin_dir.is_none();
        let bin_dir = bin_dir.map_or_else(|| default_install_dir().join("build/bin"), Path::to_path_buf);
        if install && own_build {
            run_installer(log_dir, stop, false)?;
        } else if !has_binaries(&bin_dir) {
            bail!(
                "llama.cpp's llama-bench and llama-server are not in {}; build them with {} \
                 (about 12 min on 2 cores), or point --llama-bin-dir at a build",
                bin_dir.display(),
                installer().display()
            );
        }
        if let Err(crash) = smoke_test(&bin_dir) {
            if !(install && own_build) {
                bail!("llama.cpp in {} does not run on this machine: {crash}", bin_dir.display());
            }
            eprintln!("llama.cpp died at its first run ({crash}); building it again without AMX");
            run_installer(log_dir, stop, true)?;
            smoke_test(&bin_dir).with_context(|| format!("llama.cpp in {} still dies", bin_dir.display()))?;
        }
        let isa = std::fs::read_to_string(default_install_dir().join(".built")).unwrap_or_default();
        let mut label = label(&bin_dir.join("llama-server"));
        if own_build && !isa.trim().is_empty() {
            label = format!("{label}, {}", isa.trim());
        }
        Ok(Self { bin_dir, label })
    }

    /// Path of one of its binaries.
    pub fn binary(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// How the report names this build.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// `llama-bench -p <prompt> -n <gen> -t <threads> -r <reps>` with [`PINNED_SETTINGS`] on `model`:
    /// prefill and decode tokens/s.
    pub fn bench(&self, spec: &BenchSpec, log_dir: &Path, stop: &AtomicBool) -> anyhow::Result<LlamaBench> {
        let mut command = Command::new(self.binary("llama-bench"));
        command
            .arg("-m")
            .arg(&spec.model)
            .args(["-t", &spec.threads.to_string()])
            .args(["-p", &spec.prompt_tokens.to_string()])
            .args(["-n", &spec.gen_tokens.to_string()])
            .args(["-r", &spec.reps.to_string()])
            .args(PINNED_SETTINGS)
            .args(["-o", "jsonl"]);
        let mut process = ManagedProcess::spawn("llama-bench", command, log_dir)?;
        wait_for_exit(&mut process, stop)?;
        // stdout (one JSON object per test) and stderr (progress) share the log; only the former parses.
        let log = std::fs::read_to_string(process.log_path())?;
        let results: Vec<BenchLine> = log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let find = |prompt: u32, gen: u32| {
            results.iter().find(|r| r.n_prompt == prompt && r.n_gen == gen).map(|r| r.avg_ts).with_context(
                || {
                    format!(
                        "llama-bench printed no result for -p {prompt} -n {gen}; log tail:\n{}",
                        process.log_tail(2000)
                    )
                },
            )
        };
        Ok(LlamaBench {
            prefill_tok_s: find(spec.prompt_tokens, 0)?,
            decode_tok_s: find(0, spec.gen_tokens)?,
        })
    }
}

/// What `llama-bench` runs.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// The GGUF file.
    pub model: PathBuf,
    /// CPU threads.
    pub threads: usize,
    /// Prompt tokens of the prefill test (`-p`).
    pub prompt_tokens: u32,
    /// Tokens of the decode test (`-n`).
    pub gen_tokens: u32,
    /// Repetitions of each test (`-r`); the mean counts.
    pub reps: u32,
}

/// `llama-bench`'s figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlamaBench {
    /// Prompt tokens per second (`ppN`).
    pub prefill_tok_s: f64,
    /// Generated tokens per second (`tgN`).
    pub decode_tok_s: f64,
}

/// One line of `llama-bench -o jsonl` (only the fields read).
#[derive(Deserialize)]
struct BenchLine {
    n_prompt: u32,
    n_gen: u32,
    avg_ts: f64,
}

fn has_binaries(dir: &Path) -> bool {
    dir.join("llama-bench").is_file() && dir.join("llama-server").is_file()
}

/// Runs the installer to its end (killed on Ctrl-C; an interrupted build resumes next time); `no_amx`
/// makes it build without AMX for good on this machine.
fn run_installer(log_dir: &Path, stop: &AtomicBool, no_amx: bool) -> anyhow::Result<()> {
    let script = installer();
    let mut command = Command::new(&script);
    if no_amx {
        command.env("LLAMA_CPP_NO_AMX", "1");
    }
    let mut process = ManagedProcess::spawn("install-llama-cpp", command, log_dir)?;
    eprintln!(
        "llama.cpp: running {} (at once when built; else about 12 min on 2 cores; log: {})",
        script.display(),
        process.log_path().display()
    );
    wait_for_exit(&mut process, stop)
}

/// `llama-bench` on the mesh's GGUF with an 8-token prompt and one generated token: whether the build
/// runs here at all.
fn smoke_test(bin_dir: &Path) -> anyhow::Result<()> {
    let output = Command::new(bin_dir.join("llama-bench"))
        .arg("-m")
        .arg(mesh_harness::paths::smollm2_gguf())
        .args(["-p", "8", "-n", "1", "-r", "1", "-t", "1"])
        .output()
        .context("running llama-bench")?;
    if output.status.success() {
        return Ok(());
    }
    let tail = String::from_utf8_lossy(&output.stderr);
    let tail = &tail[tail.len().saturating_sub(300)..];
    bail!("llama-bench ended with {}: {tail}", output.status)
}

/// Waits until `process` exits; fails when it fails or when `stop` is set (it is then stopped).
pub fn wait_for_exit(process: &mut ManagedProcess, stop: &AtomicBool) -> anyhow::Result<()> {
    loop {
        if let Some(status) = process.exit_status() {
            if status.success() {
                return Ok(());
            }
            bail!("{} failed ({status}); log tail:\n{}", process.name(), process.log_tail(3000));
        }
        if stop.load(Ordering::Relaxed) {
            process.stop(Duration::from_secs(2));
            bail!("interrupted");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `llama.cpp <version>` from `llama-server --version`, which prints `version: 0.5.0-dev (build 1, commit
/// 0c1e570)` (or, in older builds, `version: 7123 (0c1e570)`) on stderr.
fn label(server: &Path) -> String {
    let fallback = format!("llama.cpp (llama-cpp-python {LLAMA_CPP_PYTHON_VERSION})");
    let Ok(output) = Command::new(server).arg("--version").output() else { return fallback };
    let text =
        String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout);
    parse_version(&text).unwrap_or(fallback)
}

/// The label of a `version:` line: its first word, with a `b` before a bare build number.
fn parse_version(text: &str) -> Option<String> {
    let version = text.lines().find_map(|l| l.trim().strip_prefix("version:"))?.split_whitespace().next()?;
    Some(if version.bytes().all(|b| b.is_ascii_digit()) {
        format!("llama.cpp b{version}")
    } else {
        format!("llama.cpp {version}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_come_from_the_version_line() {
        let new = "load_backend: x\nversion: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0";
        assert_eq!(parse_version(new).as_deref(), Some("llama.cpp 0.5.0-dev"));
        assert_eq!(parse_version("version: 7123 (abc123)").as_deref(), Some("llama.cpp b7123"));
        assert_eq!(parse_version("nothing"), None);
    }

    #[test]
    fn bench_lines_parse() {
        let line = r#"{"build_commit":"x","n_prompt":512,"n_gen":0,"avg_ts":231.5,"stddev_ts":3.1}"#;
        let parsed: BenchLine = serde_json::from_str(line).expect("parse");
        assert_eq!((parsed.n_prompt, parsed.n_gen, parsed.avg_ts), (512, 0, 231.5));
    }

    #[test]
    fn the_install_dir_follows_the_scripts_rule() {
        let dir = default_install_dir();
        assert!(
            dir.ends_with(format!("llm-cache-mesh/llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"))
                || std::env::var_os("LLAMA_CPP_DIR").is_some()
        );
        assert!(installer().is_file());
    }
}
