//! `mesh`'s command line and what each command does; `src/bin/mesh.rs` parses it and calls [`Cli::run`].
//!
//! # Layout
//! - [`up`]: `mesh up`, a complete local mesh in the foreground.
//! - [`dashboard`]: `mesh dashboard`, the operator's page of a running mesh.
//! - [`certs`]: `mesh certs`, a development CA and one certificate per node.
//! - [`bench`]: `mesh bench <suite>`, each suite's options (declared once, by the suite) and its report.
//! - [`soak`]: `mesh soak`, the whole mesh under a fixed write rate and random faults for a long time.

pub mod bench;
pub mod certs;
pub mod dashboard;
pub mod soak;
pub mod up;

use clap::{Parser, Subcommand};

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "mesh", about = "Local launcher of the LLM cache mesh")]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// `mesh`'s commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a complete local mesh in the foreground.
    Up(up::UpArgs),
    /// Serve the operator's dashboard of a running mesh (by default the one `mesh up` started).
    Dashboard(dashboard::DashboardArgs),
    /// Make a development CA and one certificate per node (mutual TLS between the tiers).
    Certs(certs::CertsArgs),
    /// Run a benchmark suite against its peer, side by side; prints a table.
    Bench {
        /// The suite.
        #[command(subcommand)]
        suite: bench::BenchSuite,
    },
    /// Drive the whole mesh at a fixed write rate for a long time with random faults; prints every
    /// process's memory, files and data, and the core's collected state, once a period.
    Soak(soak::SoakArgs),
}

impl Cli {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Up(args) => up::run(args),
            Command::Dashboard(args) => dashboard::run(&args),
            Command::Certs(args) => certs::run(&args),
            Command::Bench { suite } => suite.run(),
            Command::Soak(args) => soak::run(&args),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    use super::bench::BenchSuite;
    use super::*;

    fn bench(args: &[&str]) -> BenchSuite {
        let args = ["mesh", "bench"].iter().chain(args);
        match Cli::try_parse_from(args).expect("parses").command {
            Command::Bench { suite } => suite,
            other => panic!("not a bench command: {other:?}"),
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_suite_runs_the_installer_unless_told_not_to() {
        let BenchSuite::Pod(pod) = bench(&["pod"]) else { panic!("not pod") };
        assert!(pod.options.install);
        let BenchSuite::Pod(pod) = bench(&["pod", "--no-install"]) else { panic!("not pod") };
        assert!(!pod.options.install);
        let BenchSuite::E2e(e2e) = bench(&["e2e", "--no-install", "--json", "out.json"]) else {
            panic!("not e2e")
        };
        assert!(!e2e.options.install);
        assert_eq!(e2e.json.as_deref(), Some(std::path::Path::new("out.json")));
    }

    #[test]
    fn up_serves_gemma_only_when_asked() {
        let up = |args: &[&str]| match Cli::try_parse_from(["mesh", "up"].iter().chain(args))
            .expect("parses")
            .command
        {
            Command::Up(up) => up,
            other => panic!("not up: {other:?}"),
        };
        assert!(!up(&[]).upstream);
        let with = up(&["--upstream", "--upstream-threads", "2"]);
        assert!(with.upstream);
        assert_eq!(with.upstream_threads, 2);
    }

    #[test]
    fn a_parsed_suite_stops_on_the_process_flag() {
        let BenchSuite::Core(core) = bench(&["core", "--clients", "2,8"]) else { panic!("not core") };
        assert!(std::ptr::eq(core.options.stop, crate::stop::flag()));
        assert_eq!(core.options.clients, [2, 8]);
        assert_eq!(core.json, None);
    }
}
