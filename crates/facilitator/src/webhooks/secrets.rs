//! Webhook signing secrets at rest: sealed with ChaCha20-Poly1305 (the `ring` implementation)
//! under the facilitator's `keys.webhook_secrets` key before they reach the store.
//!
//! A sealed secret is the text `enc1:<key id>:<nonce>:<ciphertext>`: `enc1` is the format's
//! version, the key id is 8 hex digits naming the key it was sealed under (a hash of the key,
//! so that a wrong or missing key is reported as such, and a key rotation knows which rows are
//! still under the previous key), the nonce is 12 random bytes drawn for each write, and the
//! ciphertext carries the 16-byte tag; both are unpadded URL-safe base64. The associated data
//! is the endpoint's id, so a sealed value copied into another endpoint's row does not open.
//!
//! Values that do not start with `enc1:` are plaintext `whsec_…` secrets written by versions
//! before this one: they are read as they are and sealed at startup
//! ([`Facilitator::seal_webhook_secrets`](crate::Facilitator::seal_webhook_secrets)).

use std::fmt;

use alloy::primitives::{hex, keccak256};
use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use ring::{
    aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey},
    rand::{SecureRandom as _, SystemRandom},
};
use secrecy::{ExposeSecret as _, ExposeSecretMut as _, SecretSlice};

use crate::config::KeyError;

/// The prefix of a sealed secret (format version 1).
pub const SEALED_PREFIX: &str = "enc1:";
/// The length of a [`SecretsKey`] in bytes.
pub const SECRETS_KEY_LEN: usize = 32;
/// Domain separation of the associated data.
const AAD_CONTEXT: &[u8] = b"tollgate webhook secret v1\0";
/// Domain separation of the key id.
const KEY_ID_CONTEXT: &[u8] = b"tollgate webhook secrets key id\0";

/// The key webhook signing secrets are encrypted with at rest: 32 random bytes, configured as
/// 64 hex digits (`keys.webhook_secrets`). The bytes are held in a [`SecretSlice`], which zeroes
/// them on drop: `Debug` prints `[REDACTED]` and the key's id, `Display` `[redacted]`.
#[derive(Clone, Debug)]
pub struct SecretsKey {
    bytes: SecretSlice<u8>,
    id: String,
}

impl SecretsKey {
    /// A key from its 32 bytes.
    pub fn from_bytes(bytes: [u8; SECRETS_KEY_LEN]) -> Self {
        Self::from_secret(bytes.to_vec().into())
    }

    /// A key from its bytes, already boxed (`SECRETS_KEY_LEN` of them).
    fn from_secret(bytes: SecretSlice<u8>) -> Self {
        let id = hex::encode(&keccak256([KEY_ID_CONTEXT, bytes.expose_secret()].concat())[..4]);
        Self { bytes, id }
    }

    /// Parses 64 hex digits, `0x` prefix optional, surrounding whitespace ignored. Errors never
    /// contain the input.
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        let digits = crate::config::secrets::key_digits(s, SECRETS_KEY_LEN)?;
        let mut bytes = SecretSlice::from(vec![0u8; SECRETS_KEY_LEN]);
        hex::decode_to_slice(digits, bytes.expose_secret_mut()).map_err(|_| KeyError::NotHex)?;
        Ok(Self::from_secret(bytes))
    }

    /// A fresh random key (what `tollgate dev` generates; in production use
    /// `openssl rand -hex 32`).
    pub fn generate() -> Result<Self, SealError> {
        let mut bytes = SecretSlice::from(vec![0u8; SECRETS_KEY_LEN]);
        SystemRandom::new()
            .fill(bytes.expose_secret_mut())
            .map_err(|_| SealError::Random)?;
        Ok(Self::from_secret(bytes))
    }

    /// The key as 64 hex digits (no `0x`), to keep it somewhere safe. Handle it like the secret
    /// it is.
    pub fn expose_hex(&self) -> String {
        hex::encode(self.bytes.expose_secret())
    }

    /// The key's id: 8 hex digits of a hash of it, written into every value it seals. Not secret.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn aead(&self) -> LessSafeKey {
        // 32 bytes is ChaCha20-Poly1305's key length, so this cannot fail.
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, self.bytes.expose_secret())
            .unwrap_or_else(|_| unreachable!("a 32-byte ChaCha20-Poly1305 key"));
        LessSafeKey::new(unbound)
    }

    /// Seals `secret` for the endpoint `endpoint_id`, with a fresh random nonce.
    pub fn seal(&self, endpoint_id: &str, secret: &str) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut buf = secret.as_bytes().to_vec();
        self.aead()
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(endpoint_id)),
                &mut buf,
            )
            .map_err(|_| SealError::Random)?;
        Ok(format!(
            "{SEALED_PREFIX}{}:{}:{}",
            self.id,
            B64.encode(nonce),
            B64.encode(&buf)
        ))
    }

    /// Opens a value this key sealed for `endpoint_id`.
    fn open(&self, endpoint_id: &str, sealed: &Sealed<'_>) -> Result<String, SealError> {
        let nonce: [u8; NONCE_LEN] = B64
            .decode(sealed.nonce)
            .ok()
            .and_then(|n| n.try_into().ok())
            .ok_or(SealError::Malformed)?;
        let mut buf = B64
            .decode(sealed.ciphertext)
            .map_err(|_| SealError::Malformed)?;
        let plain = self
            .aead()
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(endpoint_id)),
                &mut buf,
            )
            .map_err(|_| SealError::Tampered)?;
        String::from_utf8(plain.to_vec()).map_err(|_| SealError::Malformed)
    }
}

impl fmt::Display for SecretsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The configured keys: the current one seals every write; previous ones (during a key
/// rotation) only open what they sealed, until [`Facilitator::seal_webhook_secrets`] has moved
/// every value to the current key at startup.
///
/// [`Facilitator::seal_webhook_secrets`]: crate::Facilitator::seal_webhook_secrets
#[derive(Clone, Debug)]
pub struct SecretsKeys {
    current: SecretsKey,
    previous: Vec<SecretsKey>,
}

impl SecretsKeys {
    /// Just `current`.
    pub fn new(current: SecretsKey) -> Self {
        Self {
            current,
            previous: Vec::new(),
        }
    }

    /// Adds keys that open values sealed before a key rotation.
    pub fn with_previous(mut self, previous: impl IntoIterator<Item = SecretsKey>) -> Self {
        self.previous.extend(previous);
        self
    }

    /// The key every write is sealed with.
    pub fn current(&self) -> &SecretsKey {
        &self.current
    }

    /// Seals `secret` for `endpoint_id` under the current key.
    pub fn seal(&self, endpoint_id: &str, secret: &str) -> Result<String, SealError> {
        self.current.seal(endpoint_id, secret)
    }

    /// The plaintext of a stored value: a sealed value is opened with the key it names (an
    /// error when that key is not configured, or the value does not open: altered, or moved
    /// from another endpoint); a legacy plaintext value is returned as it is.
    pub fn open(&self, endpoint_id: &str, stored: &str) -> Result<String, SealError> {
        let Some(sealed) = Sealed::parse(stored)? else {
            return Ok(stored.to_owned());
        };
        self.key(sealed.key_id)?.open(endpoint_id, &sealed)
    }

    /// Whether `stored` must be rewritten: plaintext, or sealed under a previous key. Checks
    /// that a value under the current key opens (so that a wrong key is found at startup).
    pub(crate) fn needs_reseal(&self, endpoint_id: &str, stored: &str) -> Result<bool, SealError> {
        match Sealed::parse(stored)? {
            None => Ok(true),
            Some(sealed) => {
                let key = self.key(sealed.key_id)?;
                key.open(endpoint_id, &sealed)?;
                Ok(key.id != self.current.id)
            }
        }
    }

    fn key(&self, id: &str) -> Result<&SecretsKey, SealError> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == id)
            .ok_or_else(|| SealError::UnknownKey {
                key_id: id.chars().take(8).collect(),
                current: self.current.id.clone(),
            })
    }
}

/// Whether a stored value is sealed (`enc1:…`) rather than a legacy plaintext secret.
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED_PREFIX)
}

/// The parts of `enc1:<key id>:<nonce>:<ciphertext>`.
struct Sealed<'a> {
    key_id: &'a str,
    nonce: &'a str,
    ciphertext: &'a str,
}

impl<'a> Sealed<'a> {
    /// `None` for a plaintext value.
    fn parse(stored: &'a str) -> Result<Option<Self>, SealError> {
        let Some(rest) = stored.strip_prefix(SEALED_PREFIX) else {
            return Ok(None);
        };
        let mut parts = rest.split(':');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(key_id), Some(nonce), Some(ciphertext), None) => Ok(Some(Self {
                key_id,
                nonce,
                ciphertext,
            })),
            _ => Err(SealError::Malformed),
        }
    }
}

fn aad(endpoint_id: &str) -> Vec<u8> {
    [AAD_CONTEXT, endpoint_id.as_bytes()].concat()
}

/// Why a secret could not be sealed or opened. Never contains key material or a secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The stored value is sealed, but no key is configured.
    #[error(
        "the webhook secret is encrypted, but `keys.webhook_secrets` is not set: configure the key it was encrypted with"
    )]
    NoKey,
    /// Sealed under a key that is neither the current one nor a previous one.
    #[error(
        "the webhook secret is encrypted under key {key_id}, but `keys.webhook_secrets` is key {current}: \
         configure the key it was encrypted with (or list it in `keys.webhook_secrets_previous` during a key rotation)"
    )]
    UnknownKey {
        /// The id the value names.
        key_id: String,
        /// The current key's id.
        current: String,
    },
    /// The value names a configured key but does not open: it was altered, or copied from
    /// another endpoint's row.
    #[error(
        "the webhook secret does not decrypt under its key: the stored value was altered or belongs to another endpoint"
    )]
    Tampered,
    /// Not `enc1:<key id>:<nonce>:<ciphertext>`.
    #[error("the stored webhook secret is malformed")]
    Malformed,
    /// The system's random number generator failed.
    #[error("the system random number generator failed")]
    Random,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn key(b: u8) -> SecretsKey {
        SecretsKey::from_bytes([b; 32])
    }

    #[test]
    fn sealed_secrets_open_only_under_their_key_and_endpoint() {
        let keys = SecretsKeys::new(key(1));
        let a = keys.seal("we_a", SECRET).unwrap();
        let b = keys.seal("we_a", SECRET).unwrap();
        assert!(is_sealed(&a) && a.starts_with(&format!("enc1:{}:", key(1).id())));
        assert!(!a.contains(SECRET) && !a.contains(&SECRET[6..]));
        assert_ne!(a, b, "a fresh nonce per write");
        assert_eq!(keys.open("we_a", &a).unwrap(), SECRET);
        assert_eq!(
            keys.open("we_b", &a).unwrap_err(),
            SealError::Tampered,
            "moved to another row"
        );
        let mut altered = a.clone();
        altered.pop();
        altered.push(if a.ends_with('A') { 'B' } else { 'A' });
        assert_eq!(
            keys.open("we_a", &altered).unwrap_err(),
            SealError::Tampered
        );
        assert_eq!(
            keys.open("we_a", "enc1:xx").unwrap_err(),
            SealError::Malformed
        );
        // Legacy plaintext reads as it is.
        assert_eq!(keys.open("we_a", SECRET).unwrap(), SECRET);
        assert!(keys.needs_reseal("we_a", SECRET).unwrap());
        assert!(!keys.needs_reseal("we_a", &a).unwrap());
    }

    #[test]
    fn a_wrong_key_is_named_and_a_previous_key_still_opens() {
        let old = SecretsKeys::new(key(1));
        let sealed = old.seal("we_a", SECRET).unwrap();
        let wrong = SecretsKeys::new(key(2));
        let e = wrong.open("we_a", &sealed).unwrap_err();
        assert_eq!(
            e,
            SealError::UnknownKey {
                key_id: key(1).id().into(),
                current: key(2).id().into()
            }
        );
        assert!(e.to_string().contains("keys.webhook_secrets"), "{e}");
        let rotated = SecretsKeys::new(key(2)).with_previous([key(1)]);
        assert_eq!(rotated.open("we_a", &sealed).unwrap(), SECRET);
        assert!(rotated.needs_reseal("we_a", &sealed).unwrap());
        // A key whose id collides (forged into the value) still fails the AEAD check.
        let forged = sealed.replace(key(1).id(), key(2).id());
        assert_eq!(
            wrong.open("we_a", &forged).unwrap_err(),
            SealError::Tampered
        );
    }

    #[test]
    fn keys_parse_and_never_print() {
        let k = SecretsKey::from_hex(&format!(" 0x{}\n", "ab".repeat(32))).unwrap();
        assert_eq!(k.expose_hex(), "ab".repeat(32));
        let shown = format!("{k:?} {k:#?} {k} {:?}", SecretsKeys::new(k.clone()));
        assert!(!shown.contains("abab"), "{shown}");
        assert!(
            shown.contains("[REDACTED]") && shown.contains(k.id()),
            "{shown}"
        );
        assert_eq!(SecretsKey::from_hex("").unwrap_err(), KeyError::Empty);
        assert_eq!(
            SecretsKey::from_hex("0x12").unwrap_err(),
            KeyError::Length(2)
        );
        assert_eq!(
            SecretsKey::from_hex(&"zz".repeat(32)).unwrap_err(),
            KeyError::NotHex
        );
        let g = SecretsKey::generate().unwrap();
        assert_ne!(g.expose_hex(), SecretsKey::generate().unwrap().expose_hex());
        assert_eq!(SecretsKey::from_hex(&g.expose_hex()).unwrap().id(), g.id());
    }
}
