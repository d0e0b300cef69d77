//! A short, seeded soak (`mesh soak`'s run): the whole mesh under a fixed write rate of short-lived
//! entries, key and tenant invalidations, and a fault every few seconds (SIGKILL of core or regional
//! nodes, SIGTERM, a regional partition). Garbage collection must keep up: at the end every core node
//! holds about a time-to-live's worth of entries, not the run's, and few dead ones; and the faults cost no
//! more than a few failed writes. The long run, with its per-minute figures, is `mesh soak`.

use std::time::Duration;

use mesh_harness::soak::{self, SoakSpec};

/// Time to live of every entry.
const TTL_S: u64 = 5;

#[test]
fn garbage_collection_keeps_up_with_the_load_through_faults() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-soak-{}", std::process::id()));
    let spec = SoakSpec {
        data_dir: dir.clone(),
        duration: Duration::from_secs(50),
        sample_every: Duration::from_secs(10),
        ops_per_s: 200,
        clients: 16,
        keys: 1_000_000_000,
        entry_ttl_s: TTL_S,
        invalidate_one_in: 20,
        tenant_invalidation_every: Some(Duration::from_secs(20)),
        fault_every: Some(Duration::from_secs(6)),
        seed: 46,
        edge: false,
    };
    let report = soak::run(&spec, &mut |line| eprintln!("{line}"))?;
    let acknowledged = report.puts + report.invalidations;
    let rate = report.ops_per_s();
    eprintln!(
        "{acknowledged} acknowledged ({rate:.0}/s), {} errors, faults {:?}",
        report.errors, report.faults
    );

    assert!(report.faults.len() >= 2, "faults injected: {:?}", report.faults);
    assert!(report.tenant_invalidations >= 2, "tenant invalidations: {}", report.tenant_invalidations);
    assert!(acknowledged > 1_000, "the load ran: {acknowledged} acknowledged");
    assert!(
        report.errors * 20 <= acknowledged,
        "{} of {acknowledged} writes failed (last: {:?})",
        report.errors,
        report.last_error
    );
    let last: Vec<_> = report.last_samples().collect();
    for core in 1..=3 {
        let name = format!("core-{core}");
        let sample = last.iter().find(|s| s.process == name).expect("every core node sampled");
        let entries = sample.core_gauge("mesh_core_entries").expect("entries reported");
        let dead = sample.core_gauge("mesh_core_dead_entries").expect("dead entries reported");
        // Without collection a core holds every entry of the run; with it, about TTL_S seconds' worth.
        assert!(
            entries <= rate * (TTL_S + 15) as f64,
            "{name} holds {entries} entries after {acknowledged} writes at {rate:.0}/s (TTL {TTL_S} s)"
        );
        assert!(dead <= rate * 10.0, "{name} holds {dead} dead entries at {rate:.0} writes/s");
        assert!(
            sample.core_gauge("mesh_core_request_ids").is_some_and(|ids| ids > 0.0),
            "{name}: request ids"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
