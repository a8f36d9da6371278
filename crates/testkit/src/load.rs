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
