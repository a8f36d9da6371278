//! A real facilitator on a loopback port over the devnet, and a registered provider.

use std::sync::Arc;

use alloy::signers::{SignerSync as _, local::Secp256k1Signer};
use tollgate_client::FacilitatorClient;
use tollgate_facilitator::{Facilitator, NetworkSpec, Settings, store};
use tollgate_protocol::api::providers::RegisterRequest;
use tollgate_testkit::{Backend, Fixture};

/// The network the facilitator serves.
pub const NETWORK: &str = "base-sepolia";
/// The relayer, the proof key and the provider: dev accounts 8, 9 and 7.
const RELAYER: usize = 8;
const PROOF_KEY: usize = 9;
pub const PROVIDER: usize = 7;

pub struct Harness {
    pub fixture: Fixture,
    pub facilitator: Facilitator,
    pub url: String,
    server: Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    )>,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub async fn new() -> Self {
        let fixture = Fixture::new(Backend::Devnet).await.expect("chain fixture");
        let dir = tempfile::tempdir().unwrap();
        let store_url = format!("sqlite://{}", dir.path().join("facilitator.db").display());
        let store = store::open(&store_url).await.expect("store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let settings = Settings {
            public_url: url.clone(),
            webhook_allow_private: true,
            webhook_secrets: Some(tollgate_facilitator::webhooks::SecretsKeys::new(
                tollgate_facilitator::webhooks::SecretsKey::generate().unwrap(),
            )),
            ..Settings::default()
        };
        let d = fixture.deployment;
        let spec = NetworkSpec {
            name: NETWORK.into(),
            chain_id: fixture.chain.chain_id(),
            token: d.token,
            token_name: "USD Coin".into(),
            token_version: "2".into(),
            router: d.router,
            subscriptions: Some(d.subscriptions),
            confirmations: 1,
        };
        let facilitator = Facilitator::new(
            settings,
            vec![(spec, Arc::clone(&fixture.chain))],
            vec![fixture.accounts[RELAYER].address],
            fixture.accounts[PROOF_KEY].private_key,
            store,
        )
        .expect("facilitator");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(tollgate_facilitator::serve(
            facilitator.clone(),
            listener,
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            fixture,
            facilitator,
            url,
            server: Some((stop, server)),
            _dir: dir,
        }
    }

    /// Stops the facilitator's server (in-flight requests finish; connections close).
    pub async fn stop(&mut self) {
        if let Some((stop, server)) = self.server.take() {
            let _ = stop.send(());
            let _ = server.await;
        }
    }

    /// A client without an API key.
    pub fn client(&self) -> FacilitatorClient {
        FacilitatorClient::new(&self.url).unwrap()
    }

    /// The provider's key, from the registration flow (challenge, `personal_sign`, register).
    pub async fn register(&self) -> String {
        let signer = Secp256k1Signer::from_bytes(&self.fixture.accounts[PROVIDER].private_key)
            .expect("provider key");
        let f = self.client();
        let challenge = f.challenge(signer.address()).await.unwrap();
        let signature = signer
            .sign_message_sync(challenge.challenge.as_bytes())
            .unwrap();
        let registered = f
            .register(&RegisterRequest {
                address: signer.address(),
                challenge: challenge.challenge,
                signature: signature.as_bytes().into(),
            })
            .await
            .unwrap();
        assert_eq!(registered.provider, signer.address());
        registered.api_key
    }

    /// How many answers the facilitator gave on `route` (from its metrics).
    pub fn answers(&self, route: &str) -> u64 {
        let prefix = format!("tollgate_http_responses_total{{route=\"{route}\",");
        self.facilitator
            .metrics()
            .render()
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}
