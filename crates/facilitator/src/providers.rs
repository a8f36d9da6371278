//! Provider self-registration and provider authentication.
//!
//! A provider (a person or an autonomous agent) proves it holds its wallet key by signing a
//! challenge the facilitator issued (EIP-191 `personal_sign`), and gets an API key back with no
//! human step:
//!
//! 1. `POST /providers/challenge {address}` → `{challenge, expiresAt}`: a text naming this
//!    facilitator, the address, a random nonce and the expiry, stored (hashed) until it expires.
//! 2. `POST /providers/register {address, challenge, signature}` → `{apiKey, provider}`: the
//!    signature must recover `address`, the challenge must be one we issued to that address,
//!    unexpired and unused (it is consumed atomically). The key, `tg_` + 64 hex digits, is
//!    returned once; only its keccak-256 is stored.
//!
//! Authenticated endpoints take `Authorization: Bearer <key>`
//! ([`Plans::authenticate`](crate::Plans::authenticate)); `POST /providers/keys/revoke` revokes the presented key.

use alloy::primitives::{Address, B256, Signature, hex, keccak256};
use tollgate_protocol::{
    ApiErrorCode,
    api::providers::{API_KEY_PREFIX, ChallengeResponse, RegisterRequest, RegisterResponse},
};

use crate::{
    error::{Error, Result},
    facilitator::unix_now,
    plans::Plans,
};

/// How long a registration challenge stays valid (seconds).
pub(crate) const CHALLENGE_TTL_SECS: u64 = 300;

/// The label stored with a self-registered key.
const SELF_REGISTERED: &str = "self-registered";

/// 401 `Unauthorized`.
pub(crate) fn unauthorized(message: impl Into<String>) -> Error {
    Error::Unauthorized(message.into())
}

/// The text a provider signs to register.
fn challenge_text(facilitator: &str, address: Address, nonce: B256, expires_at: u64) -> String {
    format!(
        "Tollgate provider registration\n\
         Facilitator: {facilitator}\n\
         Address: {address}\n\
         Nonce: {nonce}\n\
         Expires: {expires_at}\n\
         Signing this grants an API key to publish plans for this address; it moves no funds."
    )
}

/// The keccak-256 under which an API key is stored.
pub(crate) fn key_hash(key: &str) -> B256 {
    keccak256(key.as_bytes())
}

/// An authenticated provider: the owner of an unrevoked API key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Provider {
    /// The key's owner.
    pub(crate) address: Address,
    /// The presented key's hash.
    pub(crate) key_hash: B256,
}

impl Plans {
    /// Issues a registration challenge for `address` (step 1), stored hashed until it expires.
    pub(crate) async fn challenge(&self, address: Address) -> Result<ChallengeResponse> {
        if address == Address::ZERO {
            return Err(Error::invalid(
                ApiErrorCode::InvalidField,
                "address: the zero address cannot register",
            ));
        }
        let now = unix_now();
        let expires_at = now + CHALLENGE_TTL_SECS;
        let text = challenge_text(
            &self.core.settings().public_url,
            address,
            B256::random(),
            expires_at,
        );
        self.core
            .store()
            .insert_provider_challenge(keccak256(text.as_bytes()), address, expires_at, now)
            .await?;
        Ok(ChallengeResponse {
            challenge: text,
            expires_at,
        })
    }

    /// Registers a provider that signed its challenge (step 2): consumes the challenge and
    /// issues an API key.
    pub(crate) async fn register(&self, req: &RegisterRequest) -> Result<RegisterResponse> {
        let bad_signature = || {
            unauthorized(
                "signature: not a personal_sign signature of the challenge by this address",
            )
        };
        // The signature first: a forged request must not burn a provider's challenge.
        let signature = Signature::from_raw(&req.signature).map_err(|_| bad_signature())?;
        let signer = signature
            .recover_address_from_msg(req.challenge.as_bytes())
            .map_err(|_| bad_signature())?;
        if signer != req.address {
            return Err(bad_signature());
        }
        let now = unix_now();
        let consumed = self
            .core
            .store()
            .consume_provider_challenge(keccak256(req.challenge.as_bytes()), req.address, now)
            .await?;
        if !consumed {
            return Err(unauthorized(
                "challenge: unknown, issued to another address, expired or already used; request a new one",
            ));
        }
        let api_key = format!("{API_KEY_PREFIX}{}", hex::encode(B256::random()));
        self.core
            .store()
            .insert_api_key(key_hash(&api_key), req.address, SELF_REGISTERED, now)
            .await?;
        tracing::info!(provider = %req.address, "provider registered");
        Ok(RegisterResponse {
            api_key,
            provider: req.address,
        })
    }

    /// The provider of an API key; 401 when it is unknown or revoked.
    pub(crate) async fn authenticate(&self, api_key: &str) -> Result<Provider> {
        let key_hash = key_hash(api_key);
        match self.core.store().api_key_provider(key_hash).await? {
            Some(address) => Ok(Provider { address, key_hash }),
            None => Err(unauthorized("unknown or revoked API key")),
        }
    }

    /// Revokes the key `provider` presented; whether it was still valid.
    pub(crate) async fn revoke_api_key(&self, provider: Provider) -> Result<bool> {
        let revoked = self
            .core
            .store()
            .revoke_api_key(provider.key_hash, unix_now())
            .await?;
        tracing::info!(provider = %provider.address, "API key revoked");
        Ok(revoked)
    }

    /// Issues a new API key (`tg_` and 64 hex digits) for `provider`, stored hashed under
    /// `label`; the key is returned this once. For operators (and `tollgate dev`): providers get
    /// theirs by registering (`POST /providers/register`).
    pub async fn issue_api_key(&self, provider: Address, label: &str) -> Result<String> {
        let api_key = format!("{API_KEY_PREFIX}{}", hex::encode(B256::random()));
        self.restore_api_key(&api_key, provider, label).await?;
        Ok(api_key)
    }

    /// Stores `api_key` (hashed) as a key of `provider` under `label`: a key issued earlier and
    /// kept by its holder (`tollgate dev` keeps its provider's key across restarts). Storing a
    /// key that is stored already changes nothing.
    pub async fn restore_api_key(
        &self,
        api_key: &str,
        provider: Address,
        label: &str,
    ) -> Result<()> {
        Ok(self
            .core
            .store()
            .insert_api_key(key_hash(api_key), provider, label, unix_now())
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use alloy::signers::{SignerSync, local::Secp256k1Signer};

    use super::*;

    #[test]
    fn challenge_names_facilitator_address_nonce_and_expiry() {
        let a = Address::repeat_byte(0x11);
        let t = challenge_text("http://f", a, B256::repeat_byte(2), 42);
        assert!(t.contains("Facilitator: http://f"));
        assert!(t.contains(&a.to_checksum(None)));
        assert!(t.contains(&B256::repeat_byte(2).to_string()));
        assert!(t.contains("Expires: 42"));
    }

    #[test]
    fn personal_sign_recovers_the_signer() {
        let key = Secp256k1Signer::from_bytes(&B256::repeat_byte(7)).unwrap();
        let sig = key.sign_message_sync(b"hello").unwrap();
        let parsed = Signature::from_raw(&sig.as_bytes()).unwrap();
        assert_eq!(
            parsed.recover_address_from_msg(b"hello").unwrap(),
            key.address()
        );
        assert_ne!(
            parsed.recover_address_from_msg(b"hellO").unwrap(),
            key.address()
        );
    }
}
