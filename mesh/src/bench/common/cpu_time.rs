//! CPU time that processes spent over a phase, read from `/proc/PID/stat`, as microseconds per operation.
//!
//! On a shared machine whose speed drifts from minute to minute, throughput alone moves by ±10% between two
//! runs of the same binaries; the CPU time each operation costs moves far less, so it is what an A/B
//! comparison of two builds can rely on. Elsewhere than Linux there is no figure.

/// CPU seconds (user and system, all threads) that process `pid` has used so far.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_seconds_of_stat(&stat, rustix::param::clock_ticks_per_second())
}

/// The user and system time in a `/proc/PID/stat` line, at `ticks_per_second`. The command name (field 2)
/// may hold spaces and parentheses, so the fields are counted from its last `)`.
fn cpu_seconds_of_stat(stat: &str, ticks_per_second: u64) -> Option<f64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    // Fields 3 (state) to 13 come first; 14 is utime, 15 stime.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    (ticks_per_second > 0).then(|| (utime + stime) as f64 / ticks_per_second as f64)
}

/// The CPU time of a system's server processes and of this process (the load generator), taken at the start
/// of a phase.
#[derive(Clone, Debug)]
pub struct CpuMark {
    servers: Vec<Option<f64>>,
    load_generator: Option<f64>,
    pids: Vec<u32>,
}

/// What one phase cost, in CPU microseconds per operation.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuPerOp {
    /// Each server process's, in the order their pids were given.
    pub servers_us: Vec<f64>,
    /// This process's: the load generator and the system's client library in it.
    pub load_generator_us: f64,
}

impl CpuMark {
    /// Marks the CPU time used so far by `pids` and by this process.
    pub fn now(pids: &[u32]) -> Self {
        Self {
            servers: pids.iter().map(|&pid| process_cpu_seconds(pid)).collect(),
            load_generator: process_cpu_seconds(std::process::id()),
            pids: pids.to_vec(),
        }
    }

    /// The CPU time used since this mark, per each of `ops` operations; `None` without a figure for every
    /// process (one exited, or no `/proc`) or without operations.
    pub fn per_op(&self, ops: u64) -> Option<CpuPerOp> {
        if ops == 0 {
            return None;
        }
        let later = Self::now(&self.pids);
        let per_op = |before: Option<f64>, after: Option<f64>| Some((after? - before?) * 1e6 / ops as f64);
        let servers_us = self
            .servers
            .iter()
            .zip(&later.servers)
            .map(|(&b, &a)| per_op(b, a))
            .collect::<Option<Vec<_>>>()?;
        Some(CpuPerOp { servers_us, load_generator_us: per_op(self.load_generator, later.load_generator)? })
    }
}

impl CpuPerOp {
    /// The servers' time per operation, all of them together.
    pub fn servers_total_us(&self) -> f64 {
        self.servers_us.iter().sum()
    }

    /// One line: the servers' total and each, then the load generator's.
    pub fn summary(&self) -> String {
        let each: Vec<String> = self.servers_us.iter().map(|us| format!("{us:.1}")).collect();
        format!(
            "CPU per op: servers {:.1} µs ({}), load generator {:.1} µs",
            self.servers_total_us(),
            each.join(" + "),
            self.load_generator_us
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_user_plus_system_time_even_with_a_parenthesised_name() {
        let line = "4242 (tokio) rt (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 0 0";
        assert_eq!(cpu_seconds_of_stat(line, 100), Some(3.0));
        assert_eq!(cpu_seconds_of_stat("4242 (short) S 1", 100), None);
        assert_eq!(cpu_seconds_of_stat("no name at all", 100), None);
    }

    #[test]
    fn a_phase_that_spins_costs_its_cpu_time_per_op() {
        let mark = CpuMark::now(&[std::process::id()]);
        let start = process_cpu_seconds(std::process::id()).expect("Linux has /proc");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut x = 0u64;
        while process_cpu_seconds(std::process::id()).expect("readable") < start + 0.05
            && std::time::Instant::now() < deadline
        {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
        }
        let cost = mark.per_op(1).expect("every process still there");
        assert_eq!(cost.servers_us.len(), 1);
        assert!(cost.servers_us[0] >= 50_000.0, "{cost:?}");
        assert!(cost.load_generator_us >= 50_000.0, "{cost:?}");
        assert!((cost.servers_total_us() - cost.servers_us[0]).abs() < 1e-9);
        assert!(mark.per_op(0).is_none());
        assert!(CpuMark::now(&[u32::MAX]).per_op(1).is_none(), "no such process, no figure");
    }
}
