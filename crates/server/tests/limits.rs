//! The limits over real sockets: slow and idle clients are cut off, oversized headers refused,
//! slow bodies answered 408, clients rate limited one by one, connections capped, and a shutdown
//! lets the request in flight finish.
#![allow(missing_docs)]

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::Bytes,
    extract::ConnectInfo,
    routing::{get, post},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::oneshot,
};
use tollgate_server::{ClientAddress, Limits, RateLimit, serve};

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(limits: Limits) -> Self {
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .route(
                "/peer",
                get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
            )
            .route("/echo", post(|body: Bytes| async move { body }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    "finished"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            serve(listener, app, &limits, async {
                let _ = stopped.await;
            })
            .await
        });
        Self {
            addr,
            stop: Some(stop),
            task,
        }
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }
}

/// Reads until the peer closes; `None` if that takes longer than `within`.
async fn read_to_close(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    match tokio::time::timeout(within, stream.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

/// One request on its own connection; the whole answer.
async fn request(server: &Server, raw: &str) -> String {
    let mut s = server.connect().await;
    s.write_all(raw.as_bytes()).await.unwrap();
    read_to_close(&mut s, Duration::from_secs(10))
        .await
        .expect("an answer")
}

fn get_with(headers: &str) -> String {
    format!("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{headers}\r\n")
}

fn status(answer: &str) -> u16 {
    answer.split(' ').nth(1).unwrap().parse().unwrap()
}

fn quick(limits: Limits) -> Limits {
    Limits {
        header_read_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
        ..limits
    }
    .without_rate_limit()
}

#[tokio::test]
async fn slow_and_idle_clients_are_disconnected() {
    let server = Server::start(quick(Limits::default())).await;
    // Half a header, then silence.
    let mut slow = server.connect().await;
    slow.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let answer = read_to_close(&mut slow, Duration::from_secs(10))
        .await
        .expect("the server closes a connection whose header never ends");
    assert!(started.elapsed() >= Duration::from_millis(400), "{answer}");
    // A keep-alive connection that goes quiet after one answer.
    let mut idle = server.connect().await;
    idle.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut idle, Duration::from_secs(10))
        .await
        .expect("an idle keep-alive connection is closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Nothing at all.
    let mut silent = server.connect().await;
    assert!(
        read_to_close(&mut silent, Duration::from_secs(10))
            .await
            .is_some()
    );
}

#[tokio::test]
async fn oversized_headers_are_refused() {
    let server = Server::start(Limits {
        max_header_bytes: 8192,
        max_headers: 16,
        ..Limits::default()
    })
    .await;
    assert_eq!(status(&request(&server, &get_with("")).await), 200);
    let big = format!("X-Big: {}\r\n", "a".repeat(10_000));
    assert_eq!(status(&request(&server, &get_with(&big)).await), 431);
    // The cap is exact: a header section a few bytes over it is refused, one under it is not.
    let base = get_with("").len() + "X-Big: \r\n".len();
    let over = format!("X-Big: {}\r\n", "a".repeat(8192 - base + 8));
    assert_eq!(status(&request(&server, &get_with(&over)).await), 431);
    let under = format!("X-Big: {}\r\n", "a".repeat(8192 - base - 8));
    assert_eq!(status(&request(&server, &get_with(&under)).await), 200);
    let many: String = (0..20).map(|i| format!("X-H{i}: v\r\n")).collect();
    assert_eq!(status(&request(&server, &get_with(&many)).await), 431);
    let some: String = (0..10).map(|i| format!("X-H{i}: v\r\n")).collect();
    assert_eq!(status(&request(&server, &get_with(&some)).await), 200);
}

#[tokio::test]
async fn a_body_that_never_finishes_gets_408() {
    let server = Server::start(quick(Limits::default())).await;
    let mut s = server.connect().await;
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let answer = read_to_close(&mut s, Duration::from_secs(10))
        .await
        .expect("answered and closed");
    assert_eq!(status(&answer), 408, "{answer}");
    assert!(answer.contains(r#""code":"RequestTimeout""#), "{answer}");
    // A whole body is echoed as usual.
    let ok = request(
        &server,
        "POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc",
    )
    .await;
    assert!(
        ok.starts_with("HTTP/1.1 200") && ok.ends_with("abc"),
        "{ok}"
    );
}

#[tokio::test]
async fn clients_are_rate_limited_one_by_one() {
    let limit = RateLimit::per_second(1, 3).limit_private(true);
    let server = Server::start(Limits {
        rate_limit: Some(limit.clone()),
        ..Limits::default()
    })
    .await;
    for _ in 0..3 {
        assert_eq!(status(&request(&server, &get_with("")).await), 200);
    }
    let refused = request(&server, &get_with("")).await;
    assert_eq!(status(&refused), 429, "{refused}");
    assert!(refused.contains("retry-after: 1\r\n"), "{refused}");
    assert!(refused.contains(r#""code":"RateLimited""#), "{refused}");
    // The peer is the key, so a forged X-Forwarded-For changes nothing.
    let forged = request(&server, &get_with("X-Forwarded-For: 192.0.2.7\r\n")).await;
    assert_eq!(status(&forged), 429);

    // Behind a proxy, the address it appends is the key.
    let proxied = Server::start(Limits {
        rate_limit: Some(limit.client(ClientAddress::XForwardedFor)),
        ..Limits::default()
    })
    .await;
    let from = |ip: &str| get_with(&format!("X-Forwarded-For: 198.51.100.1, {ip}\r\n"));
    for _ in 0..3 {
        assert_eq!(status(&request(&proxied, &from("192.0.2.1")).await), 200);
    }
    assert_eq!(status(&request(&proxied, &from("192.0.2.1")).await), 429);
    assert_eq!(status(&request(&proxied, &from("192.0.2.2")).await), 200);

    // Loopback (a private address) is exempt unless asked otherwise.
    let exempt = Server::start(Limits {
        rate_limit: Some(RateLimit::per_second(1, 1)),
        ..Limits::default()
    })
    .await;
    for _ in 0..5 {
        assert_eq!(status(&request(&exempt, &get_with("")).await), 200);
    }
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let server = Server::start(Limits {
        max_connections: 1,
        ..Limits::default()
    })
    .await;
    let mut first = server.connect().await;
    first
        .write_all(b"GET /peer HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = first.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // The first connection stays open (keep-alive), so the second is not served yet.
    let mut second = server.connect().await;
    second.write_all(get_with("").as_bytes()).await.unwrap();
    assert!(
        read_to_close(&mut second, Duration::from_millis(300))
            .await
            .is_none(),
        "served beyond the cap"
    );
    drop(first);
    let answer = read_to_close(&mut second, Duration::from_secs(10))
        .await
        .expect("served once a slot is free");
    assert_eq!(status(&answer), 200);
}

#[tokio::test]
async fn shutdown_finishes_the_request_in_flight() {
    let mut server = Server::start(Limits::default()).await;
    let mut s = server.connect().await;
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop.take().unwrap().send(()).unwrap();
    let answer = read_to_close(&mut s, Duration::from_secs(10))
        .await
        .expect("closed after the answer");
    assert!(answer.ends_with("finished"), "{answer}");
    server.task.await.unwrap().unwrap();
    assert!(
        TcpStream::connect(server.addr).await.is_err(),
        "no longer listening"
    );
}
