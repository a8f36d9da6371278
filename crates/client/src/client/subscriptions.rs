//! Plans and subscriptions: publishing plans (API key), the subscriber's gasless calls
//! (subscribe, raise, pause, resume, cancel, list) and metered usage (API key).

use alloy::primitives::B256;
use tollgate_protocol::{
    AllowanceUsage, DeductRequest, QuoteQuery, RaiseAllowanceRequest, SubscribeRequest,
    SubscriptionQuote, SubscriptionView,
    api::{
        plans::{CreatePlanRequest, Plan},
        subscriptions::{ActionRequest, ListSubscriptionsQuery, SubscriberAction},
    },
};

use super::{FacilitatorClient, http::network_query};
use crate::Result;

impl FacilitatorClient {
    /// `POST /plans` (API key): publishes a plan on-chain through the facilitator's relayer and
    /// waits for confirmation. The same idempotency key again returns the same plan.
    pub async fn create_plan(&self, req: &CreatePlanRequest) -> Result<Plan> {
        let url = self.url("/plans");
        let rb = self.authorized(self.inner.http.post(&url))?.json(req);
        self.send(url, rb).await
    }

    /// `GET /plans/{id}?network=`: a plan's on-chain terms and its provider (`network` is
    /// optional when the facilitator serves one).
    pub async fn plan(&self, id: B256, network: Option<&str>) -> Result<Plan> {
        let url = self.url(&format!("/plans/{id}"));
        let rb = self.inner.http.get(&url).query(&network_query(network));
        self.send(url, rb).await
    }

    /// `POST /plans/{id}/deprecate?network=` (API key, the plan's provider only): the plan takes
    /// no new subscriptions; existing ones keep running. Idempotent.
    pub async fn deprecate_plan(&self, id: B256, network: Option<&str>) -> Result<Plan> {
        let url = self.url(&format!("/plans/{id}/deprecate"));
        let rb = self
            .authorized(self.inner.http.post(&url))?
            .query(&network_query(network));
        self.send(url, rb).await
    }

    /// `GET /subscriptions/quote`: everything a subscriber signs against (plan terms, nonces,
    /// allowance, the chain's clock).
    pub async fn quote(&self, query: &QuoteQuery) -> Result<SubscriptionQuote> {
        let url = self.url("/subscriptions/quote");
        let rb = self.inner.http.get(&url).query(query);
        self.send(url, rb).await
    }

    /// `POST /subscriptions`: relays a signed `Subscribe` intent and its permit; answers once
    /// the subscription (and its first billing) is confirmed. The same signed intent again
    /// answers the same subscription.
    pub async fn subscribe(&self, req: &SubscribeRequest) -> Result<SubscriptionView> {
        self.post("/subscriptions", req).await
    }

    /// `GET /subscriptions/{id}?network=`: a subscription as the chain holds it (its
    /// `allowance.remaining` as the usage ledger counts it).
    pub async fn subscription(&self, id: B256, network: Option<&str>) -> Result<SubscriptionView> {
        let url = self.url(&format!("/subscriptions/{id}"));
        let rb = self.inner.http.get(&url).query(&network_query(network));
        self.send(url, rb).await
    }

    /// `GET /subscriptions?subscriber=&deadline=&signature=`: every subscription of the
    /// subscriber whose `personal_sign` signature the query carries (see
    /// [`ListSubscriptionsQuery`] for what is signed), each read from the chain.
    pub async fn subscriptions(
        &self,
        query: &ListSubscriptionsQuery,
    ) -> Result<Vec<SubscriptionView>> {
        let url = self.url("/subscriptions");
        let rb = self.inner.http.get(&url).query(query);
        self.send(url, rb).await
    }

    /// `POST /subscriptions/{id}/pause`: relays the subscriber's signed `pauseWithSig`; answers
    /// after confirmation. See [`ActionRequest`] for what is signed and the idempotency rules;
    /// a `503 Pending` answer means: send the same request again.
    pub async fn pause(&self, id: B256, req: &ActionRequest) -> Result<SubscriptionView> {
        self.act(id, SubscriberAction::Pause, req).await
    }

    /// `POST /subscriptions/{id}/resume`: relays the subscriber's signed `resumeWithSig` (a
    /// subscription whose paid period has ended is billed a new cycle first); answers after
    /// confirmation.
    pub async fn resume(&self, id: B256, req: &ActionRequest) -> Result<SubscriptionView> {
        self.act(id, SubscriberAction::Resume, req).await
    }

    /// `POST /subscriptions/{id}/cancel`: relays the subscriber's signed `cancelWithSig`;
    /// answers after confirmation. Cancelled is final.
    pub async fn cancel(&self, id: B256, req: &ActionRequest) -> Result<SubscriptionView> {
        self.act(id, SubscriberAction::Cancel, req).await
    }

    /// `POST /subscriptions/{id}/{action}`: [`pause`](Self::pause), [`resume`](Self::resume)
    /// or [`cancel`](Self::cancel) by value.
    pub async fn act(
        &self,
        id: B256,
        action: SubscriberAction,
        req: &ActionRequest,
    ) -> Result<SubscriptionView> {
        self.post(&format!("/subscriptions/{id}/{}", action.as_str()), req)
            .await
    }

    /// `POST /subscriptions/{id}/usage` (API key, the plan's provider): deducts metered usage
    /// from the subscription's overage allowance for the current cycle (the spec's
    /// `deductAllowance`).
    pub async fn deduct(&self, id: B256, req: &DeductRequest) -> Result<AllowanceUsage> {
        let url = self.url(&format!("/subscriptions/{id}/usage"));
        let rb = self.authorized(self.inner.http.post(&url))?.json(req);
        self.send(url, rb).await
    }

    /// `GET /subscriptions/{id}/usage?network=` (API key): the subscription's overage allowance
    /// in its current cycle.
    pub async fn usage(&self, id: B256, network: Option<&str>) -> Result<AllowanceUsage> {
        let url = self.url(&format!("/subscriptions/{id}/usage"));
        let rb = self
            .authorized(self.inner.http.get(&url))?
            .query(&network_query(network));
        self.send(url, rb).await
    }

    /// `POST /subscriptions/{id}/allowance`: relays the subscriber's signed raise of its overage
    /// cap. A `503 Pending` answer means: send the same request again.
    pub async fn raise_allowance(
        &self,
        id: B256,
        req: &RaiseAllowanceRequest,
    ) -> Result<SubscriptionView> {
        self.post(&format!("/subscriptions/{id}/allowance"), req)
            .await
    }
}
