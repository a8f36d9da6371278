//! The `WWW-Authenticate: Payment …` challenge and the key that binds it.

use std::fmt;

use alloy::primitives::{B256, keccak256};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret as _, SecretSlice};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use sha2::Sha256;

use super::{
    ChargeRequest, INTENT_CHARGE, MAX_REQUEST_LEN, METHOD_EVM, MppError, Opaque, SCHEME, b64url,
    jcs, params,
    request::{decode_object, is_canonical_object},
    rfc3339_millis,
    time::parse_rfc3339,
};

/// The server's HMAC-SHA256 key for challenge ids: at least 32 bytes, as mppx requires of its
/// `secretKey` (mppx keys with the UTF-8 bytes of that string, so an mppx server's key here is
/// `secretKey.as_bytes()`). Held in a [`SecretSlice`]: zeroed on drop, never printed.
pub struct ChallengeKey(SecretSlice<u8>);

impl ChallengeKey {
    /// The shortest key accepted, in bytes.
    pub const MIN_LEN: usize = 32;

    /// A 32-byte key.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(SecretSlice::from(bytes.to_vec()))
    }

    /// A key of at least [`ChallengeKey::MIN_LEN`] bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, MppError> {
        if bytes.len() < Self::MIN_LEN {
            return Err(MppError::KeyTooShort(bytes.len()));
        }
        Ok(Self(SecretSlice::from(bytes.to_vec())))
    }

    fn mac(&self, input: &str) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.0.expose_secret())
            .expect("HMAC takes keys of any length");
        mac.update(input.as_bytes());
        mac
    }
}

impl Clone for ChallengeKey {
    fn clone(&self) -> Self {
        Self(SecretSlice::from(self.0.expose_secret().to_vec()))
    }
}

impl fmt::Debug for ChallengeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChallengeKey([REDACTED])")
    }
}

/// One `Payment` challenge, its auth-params as sent. `request` and `opaque` stay the exact
/// base64url strings received, since the id's HMAC covers those bytes; read them with
/// [`Challenge::charge_request`] and [`Challenge::opaque`].
///
/// Its serde form is the credential's `challenge` object (camelCase, absent fields left out,
/// keys in alphabetical order as mppx's clients write them). Reading it accepts mppx's legacy
/// object-shaped `opaque` (re-encoded to the string form) and refuses a `header` other than
/// `Authorization`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// `base64url(HMAC-SHA256(key, realm|method|intent|request|expires|digest|opaque))`.
    pub id: String,
    /// The protection space: by mppx's default the server's host name. Part of the ERC-3009
    /// nonce ([`Challenge::authorization_nonce`]).
    pub realm: String,
    /// The payment method ([`METHOD_EVM`](super::METHOD_EVM) here).
    pub method: String,
    /// The intent ([`INTENT_CHARGE`](super::INTENT_CHARGE) here).
    pub intent: String,
    /// Base64url JCS of the method's request object ([`ChargeRequest`] for `evm`/`charge`).
    pub request: String,
    /// Free text for people; not covered by the id.
    pub description: Option<String>,
    /// A digest of the request body (`sha-256=<base64>`); Tollgate never sets it.
    pub digest: Option<String>,
    /// When the challenge stops being accepted, RFC 3339 ([`Challenge::expires_unix`]).
    pub expires: Option<String>,
    /// Base64url JCS of an object of strings the server binds in ([`Opaque`]).
    pub opaque: Option<String>,
}

/// `^[a-z][a-z0-9:_-]*$`, mppx's method pattern.
fn is_method(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_lowercase())
        && b.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b":_-".contains(&c))
}

impl Challenge {
    /// Issues an EVM charge challenge: `request` is [`ChargeRequest::encode`], `expires`
    /// [`rfc3339_millis`] of `expires_unix_ms`, `opaque` [`Opaque::encode`], and `id` the HMAC
    /// ([`Challenge::expected_id`]) under `key`.
    pub fn issue(
        key: &ChallengeKey,
        realm: &str,
        request: &ChargeRequest,
        expires_unix_ms: u64,
        opaque: Option<&Opaque>,
        description: Option<&str>,
    ) -> Self {
        let mut challenge = Self {
            id: String::new(),
            realm: realm.to_owned(),
            method: METHOD_EVM.to_owned(),
            intent: INTENT_CHARGE.to_owned(),
            request: request.encode(),
            description: description.map(str::to_owned),
            digest: None,
            expires: Some(rfc3339_millis(expires_unix_ms)),
            opaque: opaque.map(Opaque::encode),
        };
        challenge.id = challenge.expected_id(key);
        challenge
    }

    /// The HMAC input, exactly mppx's `idBindingInput` for a challenge without `header` (which
    /// Tollgate never issues and refuses to read): absent fields are empty slots.
    fn binding_input(&self) -> String {
        [
            self.realm.as_str(),
            &self.method,
            &self.intent,
            &self.request,
            self.expires.as_deref().unwrap_or(""),
            self.digest.as_deref().unwrap_or(""),
            self.opaque.as_deref().unwrap_or(""),
        ]
        .join("|")
    }

    /// The id `key` gives these fields:
    /// `base64url(HMAC-SHA256(key, realm|method|intent|request|expires|digest|opaque))`, absent
    /// fields as empty strings, `request` and `opaque` as the strings carried.
    pub fn expected_id(&self, key: &ChallengeKey) -> String {
        b64url(key.mac(&self.binding_input()).finalize().into_bytes())
    }

    /// Whether `key` issued this challenge: its `request` is the canonical (JCS, base64url) form
    /// of what it decodes to, which is what mppx's `Challenge.verify` HMACs, and its `id` is
    /// [`Challenge::expected_id`], compared in constant time. Requiring the canonical bytes
    /// (where mppx re-canonicalises) makes sure the request a server then reads is the one it
    /// signed; mppx clients echo it canonical.
    pub fn is_authentic(&self, key: &ChallengeKey) -> bool {
        use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
        let Ok(id) = URL_SAFE_NO_PAD.decode(&self.id) else {
            return false;
        };
        // Both checks run whatever the first says; `verify_slice` compares in constant time.
        let canonical = is_canonical_object(&self.request);
        let mac_ok = key.mac(&self.binding_input()).verify_slice(&id).is_ok();
        canonical & mac_ok
    }

    /// The `request` as an EVM charge request.
    pub fn charge_request(&self) -> Result<ChargeRequest, MppError> {
        ChargeRequest::decode(&self.request)
    }

    /// The `opaque` binding, if there is one.
    pub fn opaque(&self) -> Result<Option<Opaque>, MppError> {
        self.opaque.as_deref().map(Opaque::decode).transpose()
    }

    /// `expires` in Unix seconds (rounded down), if present ([`parse_rfc3339`]).
    pub fn expires_unix(&self) -> Result<Option<u64>, MppError> {
        self.expires.as_deref().map(parse_rfc3339).transpose()
    }

    /// The ERC-3009 nonce an `authorization` credential for this challenge must carry:
    /// `keccak256(utf8(id ‖ realm))` (mppx `challengeHash`). It ties the signature to this
    /// challenge, and makes the chain refuse a second use.
    pub fn authorization_nonce(&self) -> B256 {
        keccak256(format!("{}{}", self.id, self.realm))
    }

    /// The `WWW-Authenticate` value: `Payment id="…", realm="…", method="…", intent="…",
    /// request="…"`, then `description`, `digest`, `expires` and `opaque` when present, in
    /// mppx's order, each a quoted string (escaped as [`Challenge::parse_all`] says).
    pub fn to_header_value(&self) -> String {
        let mut out = format!("{SCHEME} ");
        params::auth_param(&mut out, "id", &self.id);
        params::auth_param(&mut out, "realm", &self.realm);
        params::auth_param(&mut out, "method", &self.method);
        params::auth_param(&mut out, "intent", &self.intent);
        params::auth_param(&mut out, "request", &self.request);
        for (name, value) in [
            ("description", &self.description),
            ("digest", &self.digest),
            ("expires", &self.expires),
            ("opaque", &self.opaque),
        ] {
            if let Some(value) = value {
                params::auth_param(&mut out, name, value);
            }
        }
        out
    }

    /// Every `Payment` challenge in these `WWW-Authenticate` values, in order. A value may hold
    /// several challenges and other schemes, comma-joined (RFC 9110 §11.6.1); the scheme is
    /// matched in any case, outside quoted strings, at the start or after a comma. Params may be
    /// tokens or quoted strings (`\"`, `\\` and mppx's `\uXXXX` unescaped), in any order;
    /// unknown params are ignored. A malformed `Payment` challenge is an `Err` entry (duplicate
    /// or missing params, a request over 16 KiB or not base64url JSON, a method not
    /// `^[a-z][a-z0-9:_-]*$`, a bad `expires` or `digest`, a non-default `header`); other
    /// schemes are skipped.
    ///
    /// Quoted strings are written back escaped so that the value is visible ASCII: `\` and `"`
    /// get a backslash and anything outside `0x20..=0x7E` becomes `\uXXXX` (mppx does that above
    /// U+00FF and refuses CR/LF; its parser reads both the same).
    pub fn parse_all<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Result<Self, MppError>> {
        values
            .into_iter()
            .flat_map(params::payment_chunks)
            .map(|chunk| Self::from_params(params::parse_params(chunk)?))
            .collect()
    }

    fn from_params(params: Vec<(String, String)>) -> Result<Self, MppError> {
        let mut fields = ChallengeFields::default();
        for (name, value) in params {
            let slot = match name.as_str() {
                "id" => &mut fields.id,
                "realm" => &mut fields.realm,
                "method" => &mut fields.method,
                "intent" => &mut fields.intent,
                "request" => &mut fields.request,
                "description" => &mut fields.description,
                "digest" => &mut fields.digest,
                "expires" => &mut fields.expires,
                "header" => &mut fields.header,
                "opaque" => &mut fields.opaque,
                _ => continue,
            };
            *slot = Some(value);
        }
        fields.into_challenge()
    }
}

/// A challenge's fields as read, before the checks mppx's `Challenge.Schema` makes.
#[derive(Default)]
struct ChallengeFields {
    id: Option<String>,
    realm: Option<String>,
    method: Option<String>,
    intent: Option<String>,
    request: Option<String>,
    description: Option<String>,
    digest: Option<String>,
    expires: Option<String>,
    header: Option<String>,
    opaque: Option<String>,
}

impl ChallengeFields {
    fn into_challenge(self) -> Result<Challenge, MppError> {
        let required = |v: Option<String>, name| v.ok_or(MppError::MissingParam(name));
        let invalid = |name, why| MppError::InvalidParam { name, why };
        let id = required(self.id, "id")?;
        if id.is_empty() {
            return Err(invalid("id", "empty"));
        }
        let method = required(self.method, "method")?;
        if !is_method(&method) {
            return Err(invalid("method", "not ^[a-z][a-z0-9:_-]*$"));
        }
        let request = required(self.request, "request")?;
        decode_object("request", &request, MAX_REQUEST_LEN)?;
        if let Some(header) = self.header
            && !header.eq_ignore_ascii_case("authorization")
        {
            return Err(MppError::UnsupportedHeader(header));
        }
        if self
            .digest
            .as_ref()
            .is_some_and(|d| !d.starts_with("sha-256="))
        {
            return Err(invalid("digest", "not sha-256=<base64>"));
        }
        if let Some(expires) = &self.expires {
            parse_rfc3339(expires)?;
        }
        Ok(Challenge {
            id,
            realm: required(self.realm, "realm")?,
            method,
            intent: required(self.intent, "intent")?,
            request,
            description: self.description,
            digest: self.digest,
            expires: self.expires,
            opaque: self.opaque,
        })
    }
}

/// The credential's `challenge` object as written: keys in alphabetical order, as mppx's
/// clients write them (so that a credential re-encodes to the same bytes).
#[derive(Serialize)]
struct ChallengeOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<&'a str>,
    id: &'a str,
    intent: &'a str,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    opaque: Option<&'a str>,
    realm: &'a str,
    request: &'a str,
}

impl Serialize for Challenge {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ChallengeOut {
            description: self.description.as_deref(),
            digest: self.digest.as_deref(),
            expires: self.expires.as_deref(),
            id: &self.id,
            intent: &self.intent,
            method: &self.method,
            opaque: self.opaque.as_deref(),
            realm: &self.realm,
            request: &self.request,
        }
        .serialize(s)
    }
}

/// The credential's `challenge` object as read: `meta` is ignored and `opaque` may be the legacy
/// object form (mppx `normalizeCredentialOpaque`).
#[derive(Deserialize)]
struct ChallengeIn {
    id: Option<String>,
    realm: Option<String>,
    method: Option<String>,
    intent: Option<String>,
    request: Option<String>,
    description: Option<String>,
    digest: Option<String>,
    expires: Option<String>,
    header: Option<String>,
    opaque: Option<OpaqueIn>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OpaqueIn {
    Encoded(String),
    Object(std::collections::BTreeMap<String, String>),
}

impl<'de> Deserialize<'de> for Challenge {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let c = ChallengeIn::deserialize(d)?;
        ChallengeFields {
            id: c.id,
            realm: c.realm,
            method: c.method,
            intent: c.intent,
            request: c.request,
            description: c.description,
            digest: c.digest,
            expires: c.expires,
            header: c.header,
            opaque: c.opaque.map(|o| match o {
                OpaqueIn::Encoded(s) => s,
                OpaqueIn::Object(map) => b64url(jcs::canonicalize(&Value::from_iter(
                    map.into_iter().map(|(k, v)| (k, Value::String(v))),
                ))),
            }),
        }
        .into_challenge()
        .map_err(serde::de::Error::custom)
    }
}
