//! [`PerIp`]: connections open from each address, so that one client cannot take every slot.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Open connections by peer address, bounded per address.
#[derive(Debug)]
pub(super) struct PerIp {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerIp {
    pub(super) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { max: max.max(1), open: Mutex::new(HashMap::new()) })
    }

    /// A slot for one more connection from `ip`, or `None` when it has its share already.
    pub(super) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<IpSlot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(ip).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(IpSlot { per_ip: Arc::clone(self), ip })
    }
}

/// One connection's slot; given back when dropped.
#[derive(Debug)]
pub(super) struct IpSlot {
    per_ip: Arc<PerIp>,
    ip: IpAddr,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self.per_ip.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_gets_its_share_and_slots_come_back() {
        let per_ip = PerIp::new(2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().expect("ip"), "10.0.0.2".parse().expect("ip"));
        let first = per_ip.admit(a).expect("one");
        let _second = per_ip.admit(a).expect("two");
        assert!(per_ip.admit(a).is_none(), "a third from the same address waits");
        assert!(per_ip.admit(b).is_some(), "another address is not held back");
        drop(first);
        assert!(per_ip.admit(a).is_some(), "a closed connection gives its slot back");
    }
}
