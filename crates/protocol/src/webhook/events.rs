//! Tollgate's webhook events, typed: [`EventType`] (every type, [`EventType::ALL`]), one data
//! struct per event, [`EventData`] (the `type` and `data` of a delivery, with
//! [`EventData::Other`] for a type this build does not know) and the delivered body,
//! [`WebhookEvent`].
//!
//! On the wire a delivery's body is `{"id", "type", "createdAt", "data"}`; `data`'s fields are
//! camelCase, amounts decimal strings ([`Amount`]), addresses and hashes `0x`-hex. Receivers
//! ignore fields they do not know, so that fields can be added; renaming or retyping one is a
//! breaking change (the golden vectors in `tests/vectors/webhooks/` hold each event's form).

use std::{fmt, str::FromStr};

use alloy::primitives::{Address, B256};
use serde::{Deserialize, Deserializer, Serialize, Serializer, ser::SerializeStruct as _};
use serde_json::Value;

use crate::Amount;

/// Where an event indexed from the chain was logged (the fields every `subscription.*`,
/// `allowance.charged`, `allowance.raised` and `plan.*` event read from a log carries).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ChainSource {
    /// The network's name (`base-sepolia`).
    pub network: crate::Network,
    /// The transaction that logged it.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub tx_hash: B256,
    /// Its block.
    pub block: u64,
}

/// `payment.settled` (confirmed on-chain) and `payment.failed` (failed for good): a settlement,
/// for its payee.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentEvent {
    /// The network's name.
    pub network: crate::Network,
    /// Its chain id.
    pub chain_id: u64,
    /// How it was settled: `router` (`/authorize`, with a fee and a proof) or `x402` (`/settle`).
    pub path: String,
    /// The token.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub token: Address,
    /// Who paid.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub payer: Address,
    /// The payee.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub pay_to: Address,
    /// The gross amount.
    pub amount: Amount,
    /// The facilitator's fee (zero on the x402 path).
    pub fee: Amount,
    /// The memo (zero on the x402 path).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub memo: B256,
    /// The EIP-3009 nonce.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub nonce: B256,
    /// The transaction, once broadcast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Hash32>))]
    pub tx_hash: Option<B256>,
    /// Its block, once confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<u64>,
    /// Why it failed (`payment.failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `subscription.created`: a subscription to one of the provider's plans, its first cycle paid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionCreated {
    /// Where it was logged.
    #[serde(flatten)]
    pub source: ChainSource,
    /// The subscription.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
    /// Its plan.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub plan_id: B256,
    /// The subscriber.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub subscriber: Address,
    /// The overage cap per cycle.
    pub max_overage: Amount,
    /// The end of the first paid cycle, unix seconds.
    pub paid_through: u64,
    /// What the first cycle paid (absent when its log was not read with this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<Amount>,
}

/// `subscription.renewed`: a cycle after the first was paid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionRenewed {
    /// Where it was logged.
    #[serde(flatten)]
    pub source: ChainSource,
    /// The subscription.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
    /// The cycle paid.
    pub cycle: u32,
    /// What it paid.
    pub amount: Amount,
    /// The new end of the paid period, unix seconds.
    pub paid_through: u64,
}

/// `subscription.renewal_failed`: a due cycle could not be collected (the subscription is
/// paused).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionRenewalFailed {
    /// Where it was logged.
    #[serde(flatten)]
    pub source: ChainSource,
    /// The subscription.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
    /// The cycle that was not paid.
    pub cycle: u32,
}

/// `subscription.renewal_stuck`: the keeper's collection of a due cycle was refused at
/// simulation too many times (once per stuck episode).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionRenewalStuck {
    /// The network's name.
    pub network: crate::Network,
    /// The subscription.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
    /// The due cycle.
    pub cycle: u32,
    /// Refused attempts so far.
    pub attempts: u32,
    /// The last refusal.
    pub error: String,
}

/// `subscription.paused`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionPaused {
    /// Where it was logged.
    #[serde(flatten)]
    pub source: ChainSource,
    /// The subscription.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
}

/// `subscription.resumed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionResumed {
    /// Where it was logged.
    #[serde(flatten)]
    pub source: ChainSource,
    /// The subscription.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
    /// The end of its paid period after resuming, unix seconds.
    pub paid_through: u64,
}

/// `subscription.cancelled`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionCancelled {
    /// Where it was logged.
    #[serde(flatten)]
    pub source: ChainSource,
    /// The subscription.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
}

/// `allowance.charged`: metered overage charged on-chain (one batch).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AllowanceCharged {
    /// Where it was logged.
    #[serde(flatten)]
    pub source: ChainSource,
    /// The subscription.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
    /// The cycle the usage was metered in.
    pub cycle: u32,
    /// What this charge pulled.
    pub amount: Amount,
    /// The cycle's overage charged so far, this charge included.
    pub used: Amount,
    /// The charge's idempotency reference.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub reference: B256,
}

/// `allowance.exhausted`: a deduction was refused at the cap (once per cycle and cap).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AllowanceExhausted {
    /// The network's name.
    pub network: crate::Network,
    /// The subscription.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
    /// The cycle.
    pub cycle: u32,
    /// The cycle's overage cap.
    pub cap: Amount,
    /// Metered so far.
    pub used: Amount,
    /// What was left.
    pub remaining: Amount,
    /// What the refused deduction asked for.
    pub requested: Amount,
}

/// `allowance.raised`: the subscriber raised the overage cap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AllowanceRaised {
    /// Where it was logged.
    #[serde(flatten)]
    pub source: ChainSource,
    /// The subscription.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
    /// The new cap per cycle.
    pub max_overage: Amount,
}

/// `plan.created`: a plan published on-chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PlanCreated {
    /// Where it was logged.
    #[serde(flatten)]
    pub source: ChainSource,
    /// The plan.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub plan_id: B256,
    /// Its token.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub token: Address,
    /// Its payee.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub pay_to: Address,
    /// The price per cycle.
    pub amount: Amount,
    /// The cycle's length, in seconds.
    pub interval: u64,
}

/// `plan.deprecated`: a plan closed to new subscribers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PlanDeprecated {
    /// Where it was logged.
    #[serde(flatten)]
    pub source: ChainSource,
    /// The plan.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub plan_id: B256,
}

/// `relayer.low_balance`: a relayer of the facilitator fell below its gas floor (once per fall),
/// for the operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RelayerLowBalance {
    /// The network's name.
    pub network: crate::Network,
    /// The relayer account.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub relayer: Address,
    /// Its balance, in wei.
    pub balance: Amount,
    /// The floor, in wei.
    pub floor: Amount,
    /// About how many settlements the balance still pays for.
    pub settlements_left: Amount,
}

/// Defines [`EventType`] and [`EventData`] from one list, so that a type, its name and its data
/// cannot drift apart.
macro_rules! events {
    ($( $(#[doc = $doc:literal])* $variant:ident($data:ty) = $name:literal, )*) => {
        /// The type of a webhook event: its `type` on the wire (`payment.settled`, …).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum EventType {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl EventType {
            /// Every event type, in the order the documentation lists them.
            pub const ALL: &'static [Self] = &[$(Self::$variant,)*];

            /// Its name on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }
        }

        /// An event's `type` and `data`: one variant per [`EventType`], and
        /// [`EventData::Other`] for a type this build does not know.
        ///
        /// Serialized alone it is `{"type": …, "data": …}`, the two fields it contributes to a
        /// [`WebhookEvent`].
        #[derive(Clone, Debug, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum EventData {
            $( $(#[doc = $doc])* $variant($data), )*
            /// An event of a type this build does not know (a newer sender), kept as received.
            Other {
                /// Its `type`.
                r#type: String,
                /// Its `data`, as received.
                data: Value,
            },
        }

        impl EventData {
            /// Its type; `None` for [`EventData::Other`].
            pub fn event_type(&self) -> Option<EventType> {
                match self {
                    $(Self::$variant(_) => Some(EventType::$variant),)*
                    Self::Other { .. } => None,
                }
            }

            /// Its `type` on the wire.
            pub fn type_name(&self) -> &str {
                match self {
                    $(Self::$variant(_) => $name,)*
                    Self::Other { r#type, .. } => r#type,
                }
            }

            /// From a `type` and a `data` object: a known type's data must have that type's
            /// shape; an unknown type is [`EventData::Other`].
            pub fn from_parts(r#type: &str, data: Value) -> Result<Self, serde_json::Error> {
                match r#type.parse::<EventType>() {
                    $(Ok(EventType::$variant) => serde_json::from_value(data).map(Self::$variant),)*
                    Err(_) => Ok(Self::Other { r#type: r#type.to_owned(), data }),
                }
            }

            /// Serializes the `data` object.
            fn serialize_data<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $(Self::$variant(data) => data.serialize(s),)*
                    Self::Other { data, .. } => data.serialize(s),
                }
            }
        }

        #[cfg(feature = "openapi")]
        impl EventData {
            /// The data schemas, one per event type (shared ones once).
            fn data_schemas(
                schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>,
            ) {
                use utoipa::{PartialSchema as _, ToSchema as _};
                $(
                    schemas.push((<$data>::name().into_owned(), <$data>::schema()));
                    <$data>::schemas(schemas);
                )*
            }

            /// `$ref`s to the data schemas.
            fn data_refs() -> Vec<utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>> {
                use utoipa::ToSchema as _;
                let mut names = vec![$(<$data>::name(),)*];
                names.dedup();
                names
                    .into_iter()
                    .map(|name| utoipa::openapi::Ref::from_schema_name(name).into())
                    .collect()
            }
        }
    };
}

events! {
    /// A settlement confirmed on-chain.
    PaymentSettled(PaymentEvent) = "payment.settled",
    /// A settlement failed for good.
    PaymentFailed(PaymentEvent) = "payment.failed",
    /// A subscription was created and its first cycle paid.
    SubscriptionCreated(SubscriptionCreated) = "subscription.created",
    /// A later cycle was paid.
    SubscriptionRenewed(SubscriptionRenewed) = "subscription.renewed",
    /// A due cycle could not be collected.
    SubscriptionRenewalFailed(SubscriptionRenewalFailed) = "subscription.renewal_failed",
    /// The keeper's collection of a due cycle keeps being refused.
    SubscriptionRenewalStuck(SubscriptionRenewalStuck) = "subscription.renewal_stuck",
    /// A subscription was paused.
    SubscriptionPaused(SubscriptionPaused) = "subscription.paused",
    /// A subscription was resumed.
    SubscriptionResumed(SubscriptionResumed) = "subscription.resumed",
    /// A subscription was cancelled.
    SubscriptionCancelled(SubscriptionCancelled) = "subscription.cancelled",
    /// Metered overage was charged on-chain.
    AllowanceCharged(AllowanceCharged) = "allowance.charged",
    /// A deduction was refused at the cap.
    AllowanceExhausted(AllowanceExhausted) = "allowance.exhausted",
    /// The subscriber raised the overage cap.
    AllowanceRaised(AllowanceRaised) = "allowance.raised",
    /// A plan was published.
    PlanCreated(PlanCreated) = "plan.created",
    /// A plan was deprecated.
    PlanDeprecated(PlanDeprecated) = "plan.deprecated",
    /// A relayer of the facilitator fell below its gas floor.
    RelayerLowBalance(RelayerLowBalance) = "relayer.low_balance",
}

impl EventType {
    /// Every event type's name, joined with `sep` (for help texts and error messages).
    pub fn list(sep: &str) -> String {
        Self::ALL
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(sep)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not an [`EventType`]'s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown event type `{0}`")]
pub struct UnknownEventType(pub String);

impl FromStr for EventType {
    type Err = UnknownEventType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownEventType(s.to_owned()))
    }
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for EventType {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(Self::ALL.iter().map(|t| t.as_str())))
            .description(Some(
                "A webhook event's type. Receivers should ignore types they do not know.",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for EventType {}

/// `{"type", "data"}` as the wire has them, `data` any JSON.
#[derive(Deserialize)]
struct RawData {
    r#type: String,
    data: Value,
}

/// Serializes the `data` object of an [`EventData`].
struct DataOf<'a>(&'a EventData);

impl Serialize for DataOf<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_data(s)
    }
}

impl Serialize for EventData {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("EventData", 2)?;
        m.serialize_field("type", self.type_name())?;
        m.serialize_field("data", &DataOf(self))?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for EventData {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawData::deserialize(d)?;
        from_raw(&raw.r#type, raw.data)
    }
}

/// [`EventData::from_parts`], its error naming the type.
fn from_raw<E: serde::de::Error>(kind: &str, data: Value) -> Result<EventData, E> {
    EventData::from_parts(kind, data).map_err(|e| E::custom(format!("`{kind}` event: {e}")))
}

/// The JSON body of a Tollgate webhook delivery.
///
/// ```json
/// {"id":"evt_…","type":"payment.settled","createdAt":1735689600,"data":{…}}
/// ```
///
/// A known type's `data` must have its shape (a receiver refuses it otherwise); a type this
/// build does not know reads as [`EventData::Other`]. Unknown top-level fields and unknown
/// fields of `data` are ignored, so that senders can add them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookEvent {
    /// The event's id (the same as the delivery's `webhook-id`).
    pub id: String,
    /// When the event happened (not when it was delivered), unix seconds.
    pub created_at: u64,
    /// Its `type` and `data`.
    pub data: EventData,
}

impl WebhookEvent {
    /// Its type; `None` for a type this build does not know.
    pub fn event_type(&self) -> Option<EventType> {
        self.data.event_type()
    }

    /// Its `type` on the wire.
    pub fn type_name(&self) -> &str {
        self.data.type_name()
    }
}

impl Serialize for WebhookEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("WebhookEvent", 4)?;
        m.serialize_field("id", &self.id)?;
        m.serialize_field("type", self.data.type_name())?;
        m.serialize_field("createdAt", &self.created_at)?;
        m.serialize_field("data", &DataOf(&self.data))?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for WebhookEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            id: String,
            r#type: String,
            created_at: u64,
            data: Value,
        }
        let raw = Raw::deserialize(d)?;
        Ok(Self {
            id: raw.id,
            created_at: raw.created_at,
            data: from_raw(&raw.r#type, raw.data)?,
        })
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for WebhookEvent {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::{
            ToSchema as _,
            openapi::{
                Ref,
                schema::{AnyOfBuilder, ObjectBuilder, Type},
            },
        };
        let data = EventData::data_refs()
            .into_iter()
            .fold(AnyOfBuilder::new(), AnyOfBuilder::item)
            .description(Some(
                "The event's data: the schema named after its type (`payment.settled` and \
                 `payment.failed`: `PaymentEvent`; `subscription.created`: \
                 `SubscriptionCreated`; …). `anyOf`, not `oneOf`: the envelope's `type` \
                 chooses, and one body can fit several shapes.",
            ));
        ObjectBuilder::new()
            .description(Some(
                "The body of a webhook delivery, signed per Standard Webhooks. Receivers \
                 ignore fields they do not know.",
            ))
            .property(
                "id",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some("The event's id: the delivery's `webhook-id`.")),
            )
            .required("id")
            .property("type", Ref::from_schema_name(EventType::name()))
            .required("type")
            .property(
                "createdAt",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                        utoipa::openapi::KnownFormat::Int64,
                    )))
                    .minimum(Some(0))
                    .description(Some("When the event happened, unix seconds.")),
            )
            .required("createdAt")
            .property("data", data)
            .required("data")
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for WebhookEvent {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        use utoipa::PartialSchema as _;
        schemas.push((EventType::name().into_owned(), EventType::schema()));
        EventData::data_schemas(schemas);
    }
}
