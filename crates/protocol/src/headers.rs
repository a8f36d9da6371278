//! The HTTP header names of the wire contract, lowercase (as `http::HeaderName` stores them;
//! header names are case-insensitive on the wire).

/// The client's payment: a Tollgate proof or an x402 V1 payment payload, base64 JSON
/// ([`crate::decode_x_payment`]).
pub const X_PAYMENT: &str = "x-payment";

/// A paid response's settlement: base64 JSON of `{success, transaction, network, payer}`
/// ([`crate::x402::SettlementResponseHeader`]).
pub const X_PAYMENT_RESPONSE: &str = "x-payment-response";

/// A subscription id (`0x` and 64 hex digits) a request is served on.
pub const X_SERVICE_SUB: &str = "x-service-sub";

/// On a response served on a subscription (`X-Service-Sub`): how it was paid, base64 JSON of a
/// [`crate::SubscriptionReceipt`] (the subscription, the network, token and payee, and what a
/// metered route took from the overage allowance).
pub const X_SERVICE_RECEIPT: &str = "x-service-receipt";

/// The payment schemes a client reads in a 402's `accepts`, comma-separated
/// (`exact, subscription`). A gate on a network with an x402 V1 name lists a plan as its own
/// `subscription` entry beside a one-time price only for a request that names `subscription`
/// here: x402 V1 clients parse every entry as `exact` and refuse a 402 with any other. On every
/// other network the 402 lists one entry per scheme whatever the request says.
pub const X_SERVICE_SCHEMES: &str = "x-service-schemes";

/// The x402 V2 payment: base64 JSON of a [`crate::x402::v2::PaymentPayloadV2`] (a gate also
/// reads a Tollgate proof here).
pub const PAYMENT_SIGNATURE: &str = "payment-signature";

/// The x402 V2 402: base64 JSON of a [`crate::x402::v2::PaymentRequiredV2`], beside the V1 body.
pub const PAYMENT_REQUIRED: &str = "payment-required";

/// The x402 V2 settlement of a paid response (the `X-PAYMENT-RESPONSE` shape, CAIP-2 network).
pub const PAYMENT_RESPONSE: &str = "payment-response";

/// Names the caller of a retried facilitator call (`POST /settle`), so that its retries get the
/// first outcome again.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// A pending x402 payment's retry token: a gate answers the payer's request whose settlement is
/// still pending with it (on the 503 `SettlementPending`), and serves the payment only to a retry
/// that echoes it (with the same payment). A Tollgate client may also choose it and send it with
/// the payment itself, so that a lost answer cannot lose it: `0x` and 64 hex digits
/// ([`crate::x402::RetryToken`]).
pub const X_PAYMENT_RETRY: &str = "x-payment-retry";

/// A 402's MPP challenges (`Payment id="…", realm="…", …`), one or several per value and one
/// value per challenge ([`crate::mpp::Challenge`]). MPP credentials come in `Authorization`.
pub const WWW_AUTHENTICATE: &str = "www-authenticate";

/// A paid MPP response's receipt: base64url JSON of `{method, reference, status, timestamp}`
/// ([`crate::mpp::Receipt`]).
pub const PAYMENT_RECEIPT: &str = "payment-receipt";
