//! Reading a request body within a size limit and a deadline: a client that sends its headers and then
//! drips its body (or never finishes it) is answered 408 and frees its task, whatever the listener's idle
//! timeout (a byte now and then keeps a connection from being idle).

use std::time::Duration;

use axum::body::{Body, Bytes};
use shared::RequestError;

/// The whole body, at most `limit` bytes, read within `deadline`.
pub async fn read_body(body: Body, limit: usize, deadline: Duration) -> Result<Bytes, RequestError> {
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => Err(RequestError::too_large(limit)),
        Err(_) => Err(RequestError::request_timeout(format!(
            "the request body did not arrive within {} ms",
            deadline.as_millis()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dripping_body_is_cut_off_and_a_whole_one_read() {
        let whole = read_body(Body::from("{}"), 16, Duration::from_secs(1)).await;
        assert_eq!(whole.ok().as_deref(), Some(&b"{}"[..]));
        assert_eq!(
            read_body(Body::from("x".repeat(17)), 16, Duration::from_secs(1))
                .await
                .map_err(|e| e.status)
                .err(),
            Some(413)
        );
        let drip = futures::stream::unfold(0u8, |n| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), n.wrapping_add(1)))
        });
        let slow = read_body(Body::from_stream(drip), 1 << 20, Duration::from_millis(300)).await;
        assert_eq!(slow.map_err(|e| e.status).err(), Some(408));
    }
}
