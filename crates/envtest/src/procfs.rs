//! What a benchmark reads about a process from /proc (Linux): CPU time,
//! resident memory, and its TCP connections to a port.

use std::collections::HashSet;

/// Clock ticks per second of /proc/<pid>/stat (USER_HZ, 100 on Linux).
const TICKS: f64 = 100.0;

/// User plus system CPU seconds the process has used so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": utime and stime are fields 14 and 15,
    // the 12th and 13th after the state.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS)
}

/// Resident memory now and at its peak (VmRSS, VmHWM), in bytes.
pub fn rss(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Established TCP connections of process `pid` to `remote_port`: its
/// socket inodes (/proc/<pid>/fd) matched against the namespace's TCP
/// tables (/proc/<pid>/net/tcp and tcp6), which list every process's.
pub fn tcp_connections_to(pid: u32, remote_port: u16) -> Option<usize> {
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        if let Ok(target) = std::fs::read_link(entry.path()) {
            let t = target.to_string_lossy();
            if let Some(inode) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                inodes.insert(inode.to_string());
            }
        }
    }
    let port = format!("{remote_port:04X}");
    let mut n = 0;
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(rem), Some(state), Some(inode)) = (f.get(2), f.get(3), f.get(9)) else {
                continue;
            };
            // 01 = ESTABLISHED.
            if *state == "01"
                && rem.rsplit(':').next() == Some(port.as_str())
                && inodes.contains(*inode)
            {
                n += 1;
            }
        }
    }
    Some(n)
}
