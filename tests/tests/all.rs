//! Every cross-process test, one module per file, in one test binary. They start real processes on
//! loopback ports, so `make test` runs them one at a time (`--test-threads=1`). One file's tests:
//! `cargo test --release --workspace --test all -- regional_04` (the same package selection as `make test`, so nothing is rebuilt).

mod auto_01_route_and_escalate;
mod backends_01_openai_compatible;
mod backends_02_fallback;
mod backends_03_text_completions;
mod backends_04_failing_backend;
mod basic_01_edge_path;
mod basic_02_trace;
mod canary_01_trial_rollback_promote;
mod clocks_01_skewed_hosts;
mod core_01_leader_kill_under_load;
mod core_02_full_restart;
mod core_03_partition;
mod core_04_membership;
mod core_05_linearizable_history;
mod core_06_damaged_segment;
mod core_07_power_cut;
mod core_08_failed_sync;
mod core_09_stop_during_install;
mod deploy_01_dashboard;
mod deploy_02_probes_and_request_ids;
mod deploy_03_trace_export;
mod deploy_04_deployment_files;
mod docs_01_flag_tables;
mod edge_02_hot_set_and_failover;
mod faults_01_core_follower_and_restart;
/// Support, not a test: a FUSE file system that loses what was not synced at a power cut.
mod lazy_fs;
mod mesh_01_one_truth;
mod mesh_02_history;
mod mesh_03_membership;
mod regional_01_semantic;
mod regional_02_restart_keeps_hot_set;
mod regional_03_coalescing;
mod regional_04_replication;
mod regional_05_overload_and_stale;
mod regional_06_hotset;
mod regional_07_model_bump;
mod regional_08_semantic_experiment;
mod security_01_mtls;
mod security_02_hostile_region;
mod security_03_http2_limits;
mod security_04_certificate_rotation;
mod soak_01_bounded_state;
mod tags_01_invalidate_and_refresh;
mod tenants_01_isolation;
mod tenants_02_abuse;
