//! Provider self-registration and API keys: `/providers/challenge`, `/providers/register`,
//! `/providers/keys/revoke`.

use alloy::primitives::Address;
use tollgate_protocol::api::providers::{
    ChallengeRequest, ChallengeResponse, RegisterRequest, RegisterResponse, RevokeResponse,
};

use super::FacilitatorClient;
use crate::Result;

impl FacilitatorClient {
    /// `POST /providers/challenge`: the text `address` signs (EIP-191) to register.
    pub async fn challenge(&self, address: Address) -> Result<ChallengeResponse> {
        self.post("/providers/challenge", &ChallengeRequest { address })
            .await
    }

    /// `POST /providers/register`: trades a signed challenge for an API key (shown this once).
    pub async fn register(&self, req: &RegisterRequest) -> Result<RegisterResponse> {
        self.post("/providers/register", req).await
    }

    /// `POST /providers/keys/revoke` (API key): revokes the client's API key.
    pub async fn revoke_api_key(&self) -> Result<RevokeResponse> {
        let url = self.url("/providers/keys/revoke");
        let rb = self.authorized(self.inner.http.post(&url))?;
        self.send(url, rb).await
    }
}
