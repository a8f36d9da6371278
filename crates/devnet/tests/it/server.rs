//! The devnet's JSON-RPC listener over real sockets, under the limits of the services'
//! `[server]` section (tollgate-server): a header that never ends is cut off, an oversized header
//! is refused with 431, a body that never ends is answered 408 and cut off, and by default the
//! limits are the facilitator's.

use std::{net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::oneshot,
};
use tollgate_devnet::{Devnet, DevnetConfig, server};
use tollgate_server::Limits;

/// A devnet (in memory) served on loopback; stops when dropped.
struct Served {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// `limits`, or the default ones of [`server::serve`] when `None`.
async fn serve(limits: Option<Limits>) -> Served {
    let devnet = Devnet::start(DevnetConfig::default()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    tokio::spawn(async move {
        match limits {
            Some(limits) => server::serve_with(devnet, listener, &limits, shutdown).await,
            None => server::serve(devnet, listener, shutdown).await,
        }
    });
    Served { addr, _stop: stop }
}

/// Short timeouts, so that the tests do not wait long for the cut-offs.
fn quick() -> Limits {
    Limits {
        header_read_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
        ..Limits::default()
    }
}

/// Reads until the server closes the connection; `None` if it has not within a minute (far
/// beyond any timeout the tests configure: a connection that is never closed).
async fn read_to_close(stream: &mut TcpStream) -> Option<String> {
    let mut out = Vec::new();
    match tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

/// Sends `raw` on a new connection; the whole answer, once the server closed the connection.
async fn exchange(served: &Served, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(served.addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    read_to_close(&mut s).await.expect("answered and closed")
}

fn status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

/// `eth_chainId` with `headers` added, on a connection the client closes after the answer.
fn chain_id_request(headers: &str) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#;
    format!(
        "POST / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devnet_rpc_cuts_off_a_header_that_never_ends() {
    let served = serve(Some(quick())).await;
    // Half a header, then silence: the server closes the connection.
    let mut slow = TcpStream::connect(served.addr).await.unwrap();
    slow.write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Type: appl")
        .await
        .unwrap();
    let answer = read_to_close(&mut slow)
        .await
        .expect("a connection whose header never ends is closed");
    assert!(!answer.contains("jsonrpc"), "{answer}");
    // Requests that do arrive are served as before.
    let answer = exchange(&served, chain_id_request("").as_bytes()).await;
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(answer.ends_with(r#""result":"0x7a69"}"#), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devnet_rpc_refuses_oversized_headers() {
    // The default limits (16 KiB, 64 fields), as `serve` without limits applies them.
    let served = serve(None).await;
    let big = format!("X-Big: {}\r\n", "a".repeat(20 * 1024));
    let answer = exchange(&served, chain_id_request(&big).as_bytes()).await;
    assert_eq!(status(&answer), 431, "{answer}");
    let many: String = (0..80).map(|i| format!("X-H{i}: v\r\n")).collect();
    let answer = exchange(&served, chain_id_request(&many).as_bytes()).await;
    assert_eq!(status(&answer), 431, "{answer}");
    let answer = exchange(&served, chain_id_request("X-Small: v\r\n").as_bytes()).await;
    assert_eq!(status(&answer), 200, "{answer}");
    // A cap set lower is the one applied.
    let served = serve(Some(Limits {
        max_header_bytes: 8192,
        max_headers: 16,
        ..quick()
    }))
    .await;
    let big = format!("X-Big: {}\r\n", "a".repeat(10_000));
    let answer = exchange(&served, chain_id_request(&big).as_bytes()).await;
    assert_eq!(status(&answer), 431, "{answer}");
    let many: String = (0..20).map(|i| format!("X-H{i}: v\r\n")).collect();
    let answer = exchange(&served, chain_id_request(&many).as_bytes()).await;
    assert_eq!(status(&answer), 431, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devnet_rpc_cuts_off_a_body_that_never_ends() {
    let served = serve(Some(quick())).await;
    // A tenth of the announced body, then silence: 408 and the connection is closed.
    let answer = exchange(
        &served,
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"jsonrpc\"",
    )
    .await;
    assert_eq!(status(&answer), 408, "{answer}");
    assert!(answer.contains(r#""code":"RequestTimeout""#), "{answer}");
}
