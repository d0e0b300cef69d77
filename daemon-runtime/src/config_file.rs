//! Each daemon's TOML configuration file. A file holds any of the daemon's settings, one key per
//! command-line flag (the flag's name with `_` for `-`: `--cache-bytes` is `cache_bytes`), documented
//! by the flag's own `--help`. A setting comes from, in order of precedence: the command line, its
//! `MESH_*` environment variable, the file (`--config FILE`), its default.
//!
//! `--print-config` prints the settings in effect as a file: every setting with its help, its flag and
//! its environment variable as a comment, ready to be saved and edited.
//!
//! The file is applied through the command-line parser itself, so a value in a file is checked exactly
//! as the same value given as a flag, and a key that names no setting is an error.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches};

/// The id of the setting that names the file.
pub const CONFIG_ID: &str = "config";
/// The id of the flag that prints the settings in effect.
pub const PRINT_ID: &str = "print_config";

/// Why a configuration file could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("cannot read the configuration file {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// The file is not TOML, or a key or value is not a setting's.
    #[error("the configuration file {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        message: String,
    },
}

/// Parses the daemon's settings from the process's command line, its environment and its configuration
/// file. A bad flag (or `--help`) exits as clap does, and so does `--print-flags` after printing the
/// table of settings ([`crate::flag_table`]); a bad file is an error.
pub fn parse<T: CommandFactory + FromArgMatches>() -> Result<Parsed<T>, ConfigFileError> {
    parse_from(std::env::args_os().collect(), |name| std::env::var_os(name).filter(|v| !v.is_empty()))
}

/// Settings parsed by [`parse`], and whether they were asked to be printed.
#[derive(Debug)]
pub struct Parsed<T> {
    /// The settings.
    pub settings: T,
    /// `--print-config`: the settings in effect as a configuration file, to print instead of running.
    pub print: Option<String>,
}

/// [`parse`] over the given arguments (the program name first) and environment lookup.
pub fn parse_from<T: CommandFactory + FromArgMatches>(
    args: Vec<OsString>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Parsed<T>, ConfigFileError> {
    let command = T::command();
    if crate::flag_table::asked(&args) {
        print!("{}", crate::flag_table::markdown(&command));
        std::process::exit(0);
    }
    let file = config_path(&command, &args, &env);
    let from_file = match &file {
        Some(path) => file_args(&command, path, &args, &env)?,
        None => Vec::new(),
    };
    let mut merged: Vec<OsString> = args.iter().take(1).cloned().collect();
    merged.extend(from_file);
    merged.extend(args.into_iter().skip(1));
    let matches = command.clone().try_get_matches_from(merged).unwrap_or_else(|e| e.exit());
    let settings = T::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let print = matches
        .try_get_one::<bool>(PRINT_ID)
        .ok()
        .flatten()
        .copied()
        .unwrap_or(false)
        .then(|| render(&command, &matches));
    Ok(Parsed { settings, print })
}

/// The file named by `--config FILE` / `--config=FILE` on the command line, else by the setting's
/// environment variable.
fn config_path(
    command: &clap::Command,
    args: &[OsString],
    env: &impl Fn(&str) -> Option<OsString>,
) -> Option<PathBuf> {
    let arg = command.get_arguments().find(|a| a.get_id() == CONFIG_ID)?;
    let long = arg.get_long()?;
    let flag = format!("--{long}");
    let prefix = format!("--{long}=");
    let mut given = args.iter().skip(1);
    while let Some(a) = given.next() {
        let a = a.to_string_lossy();
        if a == flag {
            return given.next().map(PathBuf::from);
        }
        if let Some(path) = a.strip_prefix(&prefix) {
            return Some(PathBuf::from(path));
        }
    }
    arg.get_env().and_then(|name| env(&name.to_string_lossy())).map(PathBuf::from)
}

/// The file's settings as flags, leaving out those the command line or the environment set.
fn file_args(
    command: &clap::Command,
    path: &Path,
    args: &[OsString],
    env: &impl Fn(&str) -> Option<OsString>,
) -> Result<Vec<OsString>, ConfigFileError> {
    let invalid = |message: String| ConfigFileError::Invalid { path: path.to_owned(), message };
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigFileError::Unreadable { path: path.to_owned(), source })?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| invalid(e.to_string()))?;
    let given: BTreeSet<String> = args
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str()?.strip_prefix("--").map(|f| f.split('=').next().unwrap_or(f).to_owned()))
        .collect();
    let mut flags = Vec::new();
    for (key, value) in &table {
        let arg = command
            .get_arguments()
            .find(|a| a.get_id() == key.as_str() && a.get_long().is_some())
            .filter(|a| ![CONFIG_ID, PRINT_ID].contains(&a.get_id().as_str()))
            .ok_or_else(|| invalid(format!("`{key}` is not a setting (see --help)")))?;
        let long = arg.get_long().unwrap_or_default();
        let from_env = arg.get_env().is_some_and(|name| env(&name.to_string_lossy()).is_some());
        if given.contains(long) || from_env || value.as_array().is_some_and(Vec::is_empty) {
            continue;
        }
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            match value.as_bool() {
                Some(true) => flags.push(OsString::from(format!("--{long}"))),
                Some(false) => {}
                None => return Err(invalid(format!("`{key}` must be true or false"))),
            }
        } else {
            let text = flag_value(value).ok_or_else(|| {
                invalid(format!("`{key}` must be a string, number, boolean or array of them"))
            })?;
            flags.push(OsString::from(format!("--{long}={text}")));
        }
    }
    Ok(flags)
}

/// A TOML value as the flag's text: a scalar as written, an array joined with commas.
fn flag_value(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Array(items) => {
            items.iter().map(flag_value).collect::<Option<Vec<_>>>().map(|v| v.join(","))
        }
        toml::Value::Datetime(_) | toml::Value::Table(_) => None,
    }
}

/// The settings in effect as a configuration file: each with its help as a comment; unset optional
/// settings commented out.
fn render(command: &clap::Command, matches: &ArgMatches) -> String {
    let mut out =
        format!("# {} settings; flags and MESH_* environment variables override them.\n", command.get_name());
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if arg.get_long().is_none() || [CONFIG_ID, PRINT_ID, "help", "version"].contains(&id) {
            continue;
        }
        out.push('\n');
        for line in arg.get_help().map(|h| h.to_string()).unwrap_or_default().lines() {
            out.push_str(&format!("# {line}\n"));
        }
        let flag = arg.get_long().map(|long| format!("--{long}")).unwrap_or_default();
        match arg.get_env() {
            Some(env) => out.push_str(&format!("# flag {flag}, environment {}\n", env.to_string_lossy())),
            None => out.push_str(&format!("# flag {flag}\n")),
        }
        let values: Vec<String> = matches
            .get_raw(id)
            .map(|raw| raw.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let multiple = arg.get_value_delimiter().is_some() || matches!(arg.get_action(), ArgAction::Append);
        let rendered = if matches!(arg.get_action(), ArgAction::SetTrue) {
            Some(matches.get_flag(id).to_string())
        } else if multiple && !values.is_empty() {
            Some(format!("[{}]", values.iter().map(|v| toml_scalar(v)).collect::<Vec<_>>().join(", ")))
        } else if multiple {
            None
        } else {
            values.first().map(|v| toml_scalar(v))
        };
        match rendered {
            Some(value) => out.push_str(&format!("{id} = {value}\n")),
            None if multiple => out.push_str(&format!("# {id} = []\n")),
            None => out.push_str(&format!("# {id} = \"\"\n")),
        }
    }
    out
}

/// A flag's text as a TOML scalar: numbers and booleans bare, anything else a quoted string.
fn toml_scalar(text: &str) -> String {
    let bare = text.parse::<i64>().is_ok()
        || text.parse::<bool>().is_ok()
        || (text.contains('.') && text.parse::<f64>().is_ok_and(f64::is_finite));
    if bare {
        text.to_owned()
    } else {
        toml::Value::String(text.to_owned()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use clap::Parser;

    use super::*;

    /// A daemon's settings, as the daemons declare theirs.
    #[derive(Debug, Parser)]
    #[command(name = "daemon")]
    struct Settings {
        /// Where to listen.
        #[arg(long, env = "MESH_T_LISTEN", default_value = "127.0.0.1:1")]
        listen: String,
        /// Bytes of cache.
        #[arg(long, env = "MESH_T_CACHE_BYTES", default_value_t = 10)]
        cache_bytes: u64,
        /// Peers, comma-separated.
        #[arg(long, env = "MESH_T_PEERS", value_delimiter = ',')]
        peers: Vec<String>,
        /// Form the cluster.
        #[arg(long, env = "MESH_T_BOOTSTRAP")]
        bootstrap: bool,
        /// The configuration file.
        #[arg(long, env = "MESH_T_CONFIG")]
        config: Option<PathBuf>,
        /// Print the settings in effect.
        #[arg(long)]
        print_config: bool,
    }

    fn file(text: &str) -> PathBuf {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("mesh-config-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, text).expect("write");
        path
    }

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Parsed<Settings>, ConfigFileError> {
        let env: HashMap<String, OsString> =
            env.iter().map(|(k, v)| ((*k).to_owned(), (*v).into())).collect();
        let args = std::iter::once("daemon").chain(args.iter().copied()).map(OsString::from).collect();
        parse_from(args, |name| env.get(name).cloned())
    }

    #[test]
    fn flags_then_environment_then_file_then_defaults() {
        let path =
            file("listen = \"10.0.0.1:9\"\ncache_bytes = 77\npeers = [\"a\", \"b\"]\nbootstrap = true\n");
        let config = path.to_str().expect("utf-8");
        let s = parse(&["--config", config], &[]).expect("parses").settings;
        assert_eq!(
            (s.listen.as_str(), s.cache_bytes, s.peers.clone(), s.bootstrap),
            ("10.0.0.1:9", 77, vec!["a".into(), "b".into()], true)
        );

        // clap reads the variable itself; no other test of this module looks at `listen`.
        std::env::set_var("MESH_T_LISTEN", "10.0.0.2:9");
        let s = parse(&["--config", config, "--cache-bytes", "5"], &[("MESH_T_LISTEN", "10.0.0.2:9")]);
        std::env::remove_var("MESH_T_LISTEN");
        let s = s.expect("parses").settings;
        assert_eq!((s.listen.as_str(), s.cache_bytes), ("10.0.0.2:9", 5), "env and flags win");
        let s = parse(&["--peers=c"], &[("MESH_T_CONFIG", config)]).expect("parses").settings;
        assert_eq!(s.peers, vec!["c".to_owned()], "the file may come from the environment too");

        let s = parse(&[], &[]).expect("parses").settings;
        assert_eq!((s.listen.as_str(), s.cache_bytes, s.bootstrap), ("127.0.0.1:1", 10, false));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn unknown_keys_and_bad_files_are_errors() {
        let unknown = file("cache_byte = 7\n");
        let error = parse(&["--config", unknown.to_str().expect("utf-8")], &[]).expect_err("unknown key");
        assert!(error.to_string().contains("`cache_byte` is not a setting"), "{error}");
        let nested = file("[listen]\nhost = 1\n");
        assert!(parse(&["--config", nested.to_str().expect("utf-8")], &[]).is_err());
        let broken = file("listen = \n");
        assert!(matches!(
            parse(&["--config", broken.to_str().expect("utf-8")], &[]),
            Err(ConfigFileError::Invalid { .. })
        ));
        assert!(matches!(
            parse(&["--config", "/nonexistent/mesh.toml"], &[]),
            Err(ConfigFileError::Unreadable { .. })
        ));
        for path in [unknown, nested, broken] {
            let _ = std::fs::remove_file(path);
        }
    }

    #[test]
    fn printed_settings_read_back_the_same() {
        let parsed = parse(&["--cache-bytes", "42", "--peers", "x,y", "--bootstrap", "--print-config"], &[])
            .expect("parses");
        let printed = parsed.print.expect("asked to print");
        assert!(
            printed.contains(
                "# Bytes of cache\n# flag --cache-bytes, environment MESH_T_CACHE_BYTES\ncache_bytes = 42\n"
            ),
            "{printed}"
        );
        let path = file(&printed);
        let s = parse(&["--config", path.to_str().expect("utf-8")], &[]).expect("reads back").settings;
        assert_eq!((s.cache_bytes, s.peers, s.bootstrap), (42, vec!["x".into(), "y".into()], true));
        let _ = std::fs::remove_file(path);
    }
}
