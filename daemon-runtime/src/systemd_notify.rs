//! systemd's readiness protocol (`Type=notify` units, `sd_notify(3)`): when `NOTIFY_SOCKET` is set, the
//! daemon sends `READY=1` once it may take traffic (the moment its `/readyz` turns 200) and
//! `STOPPING=1` when it starts to shut down. Without the variable nothing is sent.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::Duration;

/// The variable systemd sets for a `Type=notify` service.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// How often readiness is looked at until it holds.
const READY_POLL: Duration = Duration::from_millis(200);

/// Sends `state` (for example `"READY=1"`) to the socket `NOTIFY_SOCKET` names, if it names one.
pub fn notify(state: &str) -> io::Result<()> {
    match std::env::var_os(NOTIFY_SOCKET) {
        Some(socket) => notify_to(Path::new(&socket), state),
        None => Ok(()),
    }
}

/// Sends `state` to `socket`: a path, or a name in the abstract namespace when it starts with `@`.
pub fn notify_to(socket: &Path, state: &str) -> io::Result<()> {
    let sender = UnixDatagram::unbound()?;
    let name = socket.as_os_str().as_encoded_bytes();
    match name.strip_prefix(b"@") {
        Some(abstract_name) => {
            use std::os::linux::net::SocketAddrExt as _;
            let address = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)?;
            sender.send_to_addr(state.as_bytes(), &address)?;
        }
        None => {
            sender.send_to(state.as_bytes(), socket)?;
        }
    }
    Ok(())
}

/// Sends `READY=1` once `ready` holds (looked at every [`READY_POLL`]); nothing without `NOTIFY_SOCKET`.
pub fn notify_when_ready(ready: crate::probes::Readiness) -> Option<tokio::task::JoinHandle<()>> {
    std::env::var_os(NOTIFY_SOCKET)?;
    Some(tokio::spawn(async move {
        while ready().is_err() {
            tokio::time::sleep(READY_POLL).await;
        }
        match notify("READY=1") {
            Ok(()) => tracing::info!("told systemd the daemon is ready"),
            Err(error) => tracing::warn!(%error, "could not tell systemd the daemon is ready"),
        }
    }))
}

/// Sends `STOPPING=1`, logging a failure.
pub fn notify_stopping() {
    if let Err(error) = notify("STOPPING=1") {
        tracing::warn!(%error, "could not tell systemd the daemon is stopping");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_reach_a_path_socket_and_an_abstract_one() {
        let path = std::env::temp_dir().join(format!("notify-test-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let receiver = UnixDatagram::bind(&path).expect("bind");
        notify_to(&path, "READY=1").expect("sent");
        let mut buffer = [0u8; 64];
        let got = receiver.recv(&mut buffer).expect("received");
        assert_eq!(&buffer[..got], b"READY=1");
        let _ = std::fs::remove_file(&path);

        use std::os::linux::net::SocketAddrExt as _;
        let name = format!("notify-test-{}", std::process::id());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
        let receiver = UnixDatagram::bind_addr(&address).expect("bind abstract");
        notify_to(Path::new(&format!("@{name}")), "STOPPING=1").expect("sent");
        let got = receiver.recv(&mut buffer).expect("received");
        assert_eq!(&buffer[..got], b"STOPPING=1");
    }
}
