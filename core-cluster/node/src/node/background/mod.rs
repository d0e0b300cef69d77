//! The node's background tasks: the leader's ticker (sweeps, log time), hit reports, the refresher
//! that regenerates the hottest prompts after a bump, and the model registry file.
//!
//! # Layout
//! - [`ticker`]: the leader's periodic sweep proposal, which also keeps the log time moving.
//! - [`hit_reporter`]: counts served hits and reports them through Raft.
//! - [`refresher`]: regenerates the hottest prompts after a model-version bump.
//! - [`registry_file`]: `--model-registry`, models described in a file, registered by the leader.
//! - [`canary_judge`]: rolls back a model's version on trial once it is worse than the canary rule.
//! - [`canary_audit`]: generates a share of the trial's answers again on the current version to compare.

pub mod canary_audit;
pub mod canary_judge;
pub mod hit_reporter;
pub mod refresher;
pub mod registry_file;
pub mod ticker;
