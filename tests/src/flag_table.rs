//! README's flag tables: each daemon's `--print-flags` (a Markdown table made from the same declaration
//! as its `--help`), between README's `<!-- flags: NAME -->` and `<!-- /flags -->` markers. The test
//! `docs_01_flag_tables` checks that README holds exactly these tables; `MESH_WRITE_README=1` makes it
//! write them instead.

use std::process::Command;

use anyhow::{bail, Context};

use crate::paths;

/// The daemons whose flags README documents, by binary name, in README's order.
pub const DAEMONS: [&str; 3] = ["core-node", "regional-node", "inference-pod"];

/// What `NAME --print-flags` prints, run with an empty environment (so the defaults are the binary's).
pub fn table_of(daemon: &str) -> anyhow::Result<String> {
    let binary = paths::binary(daemon);
    let output = Command::new(&binary)
        .arg("--print-flags")
        .env_clear()
        .output()
        .with_context(|| format!("running {} --print-flags", binary.display()))?;
    if !output.status.success() {
        bail!("{daemon} --print-flags failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// The daemons README documents, in its order: the names in its `<!-- flags: NAME -->` markers.
pub fn documented(readme: &str) -> Vec<&str> {
    readme
        .match_indices(OPEN)
        .filter_map(|(i, _)| readme[i + OPEN.len()..].split_whitespace().next())
        .collect()
}

const OPEN: &str = "<!-- flags: ";
const CLOSE: &str = "<!-- /flags -->";

/// `readme` with what each `<!-- flags: NAME -->` ... `<!-- /flags -->` section holds replaced by
/// `table(NAME)`.
pub fn with_tables(readme: &str, table: impl Fn(&str) -> anyhow::Result<String>) -> anyhow::Result<String> {
    let mut out = String::with_capacity(readme.len());
    let mut rest = readme;
    while let Some(start) = rest.find(OPEN) {
        let open_end = start + rest[start..].find("-->").context("an unclosed flags marker")? + 3;
        let name = rest[start + OPEN.len()..open_end - 3].trim();
        let close = open_end + rest[open_end..].find(CLOSE).context("a flags marker never closed")?;
        out.push_str(&rest[..open_end]);
        out.push('\n');
        out.push_str(&table(name)?);
        rest = &rest[close..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_replace_what_the_markers_hold() {
        let readme = "a\n<!-- flags: x -->\nold\n<!-- /flags -->\nb\n<!-- flags: y -->\n<!-- /flags -->\n";
        assert_eq!(documented(readme), ["x", "y"]);
        let table = |name: &str| Ok(format!("table {name}\n"));
        let written = with_tables(readme, table).expect("writes");
        assert_eq!(
            written,
            "a\n<!-- flags: x -->\ntable x\n<!-- /flags -->\nb\n<!-- flags: y -->\ntable y\n<!-- /flags -->\n"
        );
        assert_eq!(with_tables(&written, table).expect("again"), written, "writing twice changes nothing");
        assert!(with_tables("<!-- flags: x -->\n", table).is_err(), "an unclosed section is an error");
    }
}
