//! `--print-flags`: a daemon's settings as a Markdown table (flag, environment variable, default,
//! meaning), made from the same declaration as `--help` and `--print-config`. README's flag tables are
//! this output (the harness's `docs_01_flag_tables` test checks them). Like `--help`, it prints and exits
//! before the settings are checked, so it needs none of the required flags.

use clap::{ArgAction, Command};

/// The flag that prints the table.
pub const PRINT_FLAGS: &str = "--print-flags";

/// The daemon's settings as a Markdown table, one row per flag in declaration order.
pub fn markdown(command: &Command) -> String {
    let mut table = String::from("| Flag | Environment | Default | Meaning |\n|---|---|---|---|\n");
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if arg.is_hide_set() || ["help", "version"].contains(&arg.get_id().as_str()) {
            continue;
        }
        let environment = arg.get_env().map(|e| format!("`{}`", e.to_string_lossy())).unwrap_or_default();
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .filter(|v| !v.is_empty())
            .collect();
        let default = match (defaults.is_empty(), arg.is_required_set()) {
            (_, true) => "required".to_owned(),
            (true, false) => String::new(),
            (false, false) if matches!(arg.get_action(), ArgAction::SetTrue) => String::new(),
            (false, false) => format!("`{}`", cell(&defaults.join(","))),
        };
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        table.push_str(&format!("| `--{long}` | {environment} | {default} | {} |\n", cell(&help)));
    }
    table
}

/// Whether the command line asks for the table (any argument after the program's name).
pub fn asked(args: &[std::ffi::OsString]) -> bool {
    args.iter().skip(1).any(|a| a == PRINT_FLAGS)
}

/// Text safe inside a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    /// A daemon's settings, as the daemons declare theirs.
    #[derive(Debug, Parser)]
    #[command(name = "daemon")]
    struct Settings {
        /// Where to listen.
        #[arg(long, env = "MESH_T_LISTEN", default_value = "127.0.0.1:1")]
        listen: String,
        /// This node's id.
        #[arg(long)]
        id: u64,
        /// Peers, comma-separated; a | in help.
        #[arg(long, env = "MESH_T_PEERS", value_delimiter = ',')]
        peers: Vec<String>,
        /// Form the cluster.
        #[arg(long)]
        bootstrap: bool,
    }

    #[test]
    fn each_flag_is_a_row_in_declaration_order() {
        let table = markdown(&Settings::command());
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(
            rows,
            [
                "| `--listen` | `MESH_T_LISTEN` | `127.0.0.1:1` | Where to listen |",
                "| `--id` |  | required | This node's id |",
                "| `--peers` | `MESH_T_PEERS` |  | Peers, comma-separated; a \\| in help |",
                "| `--bootstrap` |  |  | Form the cluster |",
            ]
        );
    }

    #[test]
    fn the_table_is_asked_for_anywhere_after_the_program() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert!(asked(&args(&["daemon", "--id", "1", "--print-flags"])));
        assert!(!asked(&args(&["--print-flags"])));
        assert!(!asked(&args(&["daemon", "--print-config"])));
    }
}
