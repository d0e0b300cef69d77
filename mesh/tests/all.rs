//! The `mesh` tool's cross-process tests, in one test binary run one at a time (`--test-threads=1`), as
//! the harness's are.

mod dashboard_01_page;
mod upstream_01_llama_server;
