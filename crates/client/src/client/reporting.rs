//! What a provider observes (API key): webhook endpoints and their deliveries, the event log,
//! and analytics.

use tollgate_protocol::api::{
    analytics::{Report, ReportParams},
    webhooks::{CreateEndpoint, Delivery, Endpoint, EventRecord, Page, Rotate, UpdateEndpoint},
};

use super::FacilitatorClient;
use crate::Result;

impl FacilitatorClient {
    /// `POST /webhooks/endpoints`: adds an endpoint; the answer carries its signing secret, this
    /// once.
    pub async fn create_endpoint(&self, req: &CreateEndpoint) -> Result<Endpoint> {
        let url = self.url("/webhooks/endpoints");
        let rb = self.authorized(self.inner.http.post(&url))?.json(req);
        self.send(url, rb).await
    }

    /// `GET /webhooks/endpoints`: the provider's endpoints (without secrets).
    pub async fn endpoints(&self) -> Result<Vec<Endpoint>> {
        let url = self.url("/webhooks/endpoints");
        let rb = self.authorized(self.inner.http.get(&url))?;
        self.send(url, rb).await
    }

    /// `GET /webhooks/endpoints/{id}`.
    pub async fn endpoint(&self, id: &str) -> Result<Endpoint> {
        let url = self.segments(&["webhooks", "endpoints", id])?;
        let rb = self.authorized(self.inner.http.get(&url))?;
        self.send(url, rb).await
    }

    /// `PATCH /webhooks/endpoints/{id}`: changes the URL, event types, description or enabled
    /// state.
    pub async fn update_endpoint(&self, id: &str, req: &UpdateEndpoint) -> Result<Endpoint> {
        let url = self.segments(&["webhooks", "endpoints", id])?;
        let rb = self.authorized(self.inner.http.patch(&url))?.json(req);
        self.send(url, rb).await
    }

    /// `DELETE /webhooks/endpoints/{id}`: the endpoint and its pending deliveries.
    pub async fn delete_endpoint(&self, id: &str) -> Result<()> {
        let url = self.segments(&["webhooks", "endpoints", id])?;
        let rb = self.authorized(self.inner.http.delete(&url))?;
        self.send_empty(url, rb).await
    }

    /// `POST /webhooks/endpoints/{id}/rotate`: a new signing secret (in the answer, this once);
    /// the old one keeps signing beside it for the overlap.
    pub async fn rotate_endpoint_secret(&self, id: &str, req: &Rotate) -> Result<Endpoint> {
        let url = self.segments(&["webhooks", "endpoints", id, "rotate"])?;
        let rb = self.authorized(self.inner.http.post(&url))?.json(req);
        self.send(url, rb).await
    }

    /// `GET /webhooks/endpoints/{id}/deliveries?limit=`: the endpoint's latest deliveries.
    pub async fn deliveries(&self, id: &str, page: &Page) -> Result<Vec<Delivery>> {
        let url = self.segments(&["webhooks", "endpoints", id, "deliveries"])?;
        let rb = self.authorized(self.inner.http.get(&url))?.query(page);
        self.send(url, rb).await
    }

    /// `POST /webhooks/endpoints/{id}/deliveries/{event_id}/redeliver`: delivers the event to
    /// the endpoint again (e.g. a dead-lettered one).
    pub async fn redeliver(&self, id: &str, event_id: &str) -> Result<()> {
        let url = self.segments(&[
            "webhooks",
            "endpoints",
            id,
            "deliveries",
            event_id,
            "redeliver",
        ])?;
        let rb = self.authorized(self.inner.http.post(&url))?;
        self.send_empty(url, rb).await
    }

    /// `GET /events?after=&limit=`: the provider's events, oldest first.
    pub async fn events(&self, page: &Page) -> Result<Vec<EventRecord>> {
        let url = self.url("/events");
        let rb = self.authorized(self.inner.http.get(&url))?.query(page);
        self.send(url, rb).await
    }

    /// `GET /analytics`: the provider's report over a range.
    pub async fn analytics(&self, params: &ReportParams) -> Result<Report> {
        let url = self.url("/analytics");
        let rb = self.authorized(self.inner.http.get(&url))?.query(params);
        self.send(url, rb).await
    }
}
