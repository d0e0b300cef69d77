//! The process's stop flag: set by SIGINT or SIGTERM once [`install_handlers`] ran. A benchmark stops at
//! its next check and still reports; `mesh up` and `mesh dashboard` stop what they started.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock};

/// The flag; [`signal_hook`] sets it through an `Arc`.
static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// The flag a suite's options carry (their default when parsed from the command line).
pub fn flag() -> &'static AtomicBool {
    &STOP
}

/// Makes SIGINT and SIGTERM set [`flag`] instead of ending the process.
pub fn install_handlers() -> anyhow::Result<()> {
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&STOP))?;
    }
    Ok(())
}
