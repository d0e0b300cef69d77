//! README's flag tables are the daemons' own: each is the binary's `--print-flags`, so a flag added,
//! renamed or re-documented without README following fails here. `MESH_WRITE_README=1` rewrites the
//! tables in place.

use mesh_harness::{flag_table, paths};

#[test]
fn readme_flag_tables_match_the_binaries() -> anyhow::Result<()> {
    let path = paths::repo_root().join("README.md");
    let readme = std::fs::read_to_string(&path)?;
    assert_eq!(flag_table::documented(&readme), flag_table::DAEMONS, "README documents each daemon's flags");
    let expected = flag_table::with_tables(&readme, flag_table::table_of)?;
    if std::env::var_os("MESH_WRITE_README").is_some() {
        std::fs::write(&path, &expected)?;
        return Ok(());
    }
    assert!(
        readme == expected,
        "README's flag tables differ from the binaries' --print-flags; run \
         `MESH_WRITE_README=1 cargo test --release --workspace --test all -- docs_01` and review the diff"
    );
    Ok(())
}
