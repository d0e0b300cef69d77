//! `mesh`: the local launcher. `mesh up` starts a complete mesh on this machine (3 core nodes, the
//! inference pod, 2 regional nodes, the edge under `wrangler dev`) in the foreground; Ctrl-C stops it.
//! `mesh certs` makes its certificates, `mesh dashboard` serves the operator's page of a running mesh, and
//! `mesh bench <suite>` measures a tier against its peers side by side (`shared/design/BENCHMARKS.md`).
//! The command line and the commands are [`mesh_tool::cli`].

use clap::Parser as _;
use mesh_tool::cli::Cli;

/// mimalloc rather than glibc's allocator: as a load generator, this process allocates and frees buffers for
/// every request it sends, for whichever system it measures; with glibc, malloc and free were about a sixth
/// of its CPU time in `mesh bench core`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    Cli::parse().run()
}
