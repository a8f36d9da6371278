//! A minimal HTTP/1.1 load generator over keep-alive loopback connections, shared by the gate's
//! and the gateway's benches: small enough that it measures the server, not itself.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `request` `count` times on one keep-alive connection, one at a time; returns how many
/// answers had status `expect`.
pub async fn keep_alive(
    addr: std::net::SocketAddr,
    request: &[u8],
    count: usize,
    expect: u16,
) -> usize {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let status_line = format!("HTTP/1.1 {expect}");
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = 0;
    for _ in 0..count {
        s.write_all(request).await.unwrap();
        let mut have = 0;
        loop {
            let n = s.read(&mut buf[have..]).await.unwrap();
            assert!(n > 0, "connection closed");
            have += n;
            if let Some(end) = find(&buf[..have], b"\r\n\r\n") {
                let head = std::str::from_utf8(&buf[..end]).unwrap().to_owned();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap();
                while have < end + 4 + len {
                    have += s.read(&mut buf[have..]).await.unwrap();
                }
                if head.starts_with(&status_line) {
                    seen += 1;
                }
                break;
            }
        }
    }
    seen
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The CPU seconds process `pid` has spent (user + system, every thread), from
/// `/proc/<pid>/stat` (Linux; `None` for a process not found). In clock ticks of 1/100 s: over a
/// phase of seconds the figure is good to a per cent.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's name (in parentheses, maybe with spaces): utime and stime are the
    // 12th and 13th fields (the 14th and 15th of the line).
    let mut fields = stat[stat.rfind(')')? + 2..].split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((user + system) as f64 / 100.0)
}

/// The CPU seconds the whole machine has spent busy (every core: user, nice, system, interrupts,
/// steal; not idle or I/O wait), from `/proc/stat` (Linux; `None` elsewhere). In clock ticks of
/// 1/100 s.
pub fn machine_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy = [0, 1, 2, 5, 6, 7]
        .iter()
        .map(|&i| f.get(i).copied().unwrap_or(0))
        .sum::<u64>();
    Some(busy as f64 / 100.0)
}
