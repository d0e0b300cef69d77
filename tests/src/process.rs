//! One managed child process. Each child runs in its own process group so that stopping it also stops
//! whatever it started (wrangler starts workerd), and so a Ctrl-C at the launcher's terminal reaches only
//! the launcher, which then stops the children in order.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};

use crate::poll::poll_every;

/// A running child process with its log file; stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct ManagedProcess {
    name: String,
    child: Child,
    log: PathBuf,
}

impl ManagedProcess {
    /// Starts `command` in a new process group with stdout and stderr appended to `<log_dir>/<name>.log`.
    pub fn spawn(name: &str, mut command: Command, log_dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(log_dir)?;
        let log = log_dir.join(format!("{name}.log"));
        let out = File::options().create(true).append(true).open(&log)?;
        let err = out.try_clone()?;
        // Log files, not terminals: no colour codes.
        command.stdin(Stdio::null()).stdout(out).stderr(err).env("NO_COLOR", "1").process_group(0);
        let child =
            command.spawn().with_context(|| format!("starting {name} ({:?})", command.get_program()))?;
        Ok(Self { name: name.to_owned(), child, log })
    }

    /// The process's name in logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its operating-system process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How it ended, or `None` while it runs.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Where its stdout and stderr go.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `max_bytes` of its log.
    pub fn log_tail(&self, max_bytes: usize) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(&self.log) {
            let _ = file.read_to_string(&mut text);
        }
        let start = text.len().saturating_sub(max_bytes);
        let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
        text[start..].to_owned()
    }

    /// Kills the whole process group at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        signal_group(self.child.id(), Signal::Kill);
        let _ = self.child.wait();
    }

    /// Asks the process group to stop (SIGTERM), waits up to `grace`, then kills it.
    pub fn stop(&mut self, grace: Duration) {
        if !self.is_running() {
            signal_group(self.child.id(), Signal::Kill);
            return;
        }
        signal_group(self.child.id(), Signal::Term);
        let exited = poll_every(Duration::from_millis(25), grace, "an exit after SIGTERM", || {
            Ok((!self.is_running()).then_some(()))
        });
        match exited {
            // The leader is gone; make sure nothing it started lingers.
            Ok(()) => signal_group(self.child.id(), Signal::Kill),
            Err(_) => self.kill(),
        }
    }

    /// Polls `url` until it answers 200, failing early if the process exits.
    pub fn wait_ready(&mut self, url: &str, timeout: Duration) -> anyhow::Result<()> {
        let agent = crate::client::agent(Duration::from_secs(2));
        let what = format!("{} answering 200 at {url}", self.name);
        poll_every(Duration::from_millis(100), timeout, &what, || {
            if !self.is_running() {
                bail!("{} exited during start-up", self.name);
            }
            Ok(agent.get(url).call().is_ok_and(|response| response.status() == 200).then_some(()))
        })
        .map_err(|e| anyhow!("{e}; log tail:\n{}", self.log_tail(4000)))
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

enum Signal {
    Term,
    Kill,
}

/// Sends a signal to a whole process group (a group already gone is not an error).
fn signal_group(pgid: u32, signal: Signal) {
    let signal = match signal {
        Signal::Term => rustix::process::Signal::TERM,
        Signal::Kill => rustix::process::Signal::KILL,
    };
    let Some(pgid) = i32::try_from(pgid).ok().and_then(rustix::process::Pid::from_raw) else { return };
    let _ = rustix::process::kill_process_group(pgid, signal);
}
