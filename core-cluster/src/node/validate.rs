//! Checks on what callers send, done on the receiving node before anything reaches Raft.

use super::error::CoreError;

/// Longest cache key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// Longest tenant or model name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest request id accepted, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// A cache key: not empty, at most [`MAX_KEY_BYTES`].
pub fn key(key: &str) -> Result<(), CoreError> {
    if key.is_empty() {
        return Err(CoreError::InvalidArgument("key is empty".into()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(CoreError::InvalidArgument(format!("key is longer than {MAX_KEY_BYTES} bytes")));
    }
    Ok(())
}

/// A tenant or model name: not empty, at most [`MAX_NAME_BYTES`], no control characters.
pub fn name(what: &str, value: &str) -> Result<(), CoreError> {
    if value.is_empty() {
        return Err(CoreError::InvalidArgument(format!("{what} is empty")));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(CoreError::InvalidArgument(format!("{what} is longer than {MAX_NAME_BYTES} bytes")));
    }
    if value.chars().any(char::is_control) {
        return Err(CoreError::InvalidArgument(format!("{what} contains control characters")));
    }
    Ok(())
}

/// A request id: at most [`MAX_REQUEST_ID_BYTES`] (empty means none).
pub fn request_id(id: &str) -> Result<(), CoreError> {
    if id.len() > MAX_REQUEST_ID_BYTES {
        return Err(CoreError::InvalidArgument(format!(
            "request_id is longer than {MAX_REQUEST_ID_BYTES} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_empty_long_and_control_characters() {
        assert!(key("").is_err());
        assert!(key(&"k".repeat(MAX_KEY_BYTES + 1)).is_err());
        assert!(key("v1:abc").is_ok());
        assert!(name("tenant", "").is_err());
        assert!(name("tenant", "a\u{0}b").is_err());
        assert!(name("tenant", &"t".repeat(MAX_NAME_BYTES + 1)).is_err());
        assert!(name("tenant", "acme").is_ok());
        assert!(request_id(&"r".repeat(MAX_REQUEST_ID_BYTES + 1)).is_err());
        assert!(request_id("").is_ok());
    }
}
