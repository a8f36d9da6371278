//! A real facilitator on a loopback port over the devnet, and a registered provider.

use std::ops::{Deref, DerefMut};

use alloy::signers::{SignerSync as _, local::Secp256k1Signer};
use tollgate_client::FacilitatorClient;
use tollgate_facilitator::webhooks::{SecretsKey, SecretsKeys};
use tollgate_protocol::api::providers::RegisterRequest;
use tollgate_testkit::harness::TestNet;

/// The network the facilitator serves.
pub const NETWORK: &str = "base-sepolia";
/// The provider: dev account 7.
pub const PROVIDER: usize = tollgate_testkit::harness::PAYEE;

/// The shared [`TestNet`] (the devnet, a facilitator serving [`NETWORK`] with webhooks to
/// loopback allowed) with a typed client and the provider's registration.
pub struct Harness(TestNet);

impl Deref for Harness {
    type Target = TestNet;

    fn deref(&self) -> &TestNet {
        &self.0
    }
}

impl DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut TestNet {
        &mut self.0
    }
}

impl Harness {
    pub async fn new() -> Self {
        let net = TestNet::builder()
            .networks([NETWORK])
            .settings(|s| {
                s.webhook_allow_private = true;
                s.webhook_secrets = Some(SecretsKeys::new(SecretsKey::generate().unwrap()));
            })
            .start()
            .await
            .expect("test network");
        Self(net)
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
