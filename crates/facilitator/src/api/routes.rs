//! [`Routes`]: the one list of the facilitator's routes, from which both the router and the
//! OpenAPI document are built.

use axum::{Router, handler::Handler, routing::MethodRouter};
use utoipa::openapi::HttpMethod;

use crate::{
    facilitator::Facilitator,
    openapi::builder::{Doc, Op},
};

/// The routes as they are declared, area by area (each handler module's `routes`): a route is a
/// method, a path template, its handler and its OpenAPI operation ([`Op`]), added at once to the
/// router, to the document's paths and to the list of path templates (the metrics' route
/// labels), so that none of the three can miss a route the others have.
pub(crate) struct Routes {
    router: Router<Facilitator>,
    doc: Doc,
    paths: Vec<&'static str>,
}

impl Routes {
    /// No route yet.
    pub(crate) fn new() -> Self {
        Self {
            router: Router::new(),
            doc: Doc::default(),
            paths: Vec::new(),
        }
    }

    /// `GET path`, answered by `handler`, described by `op`.
    pub(crate) fn get<H, T>(&mut self, path: &'static str, handler: H, op: Op) -> &mut Self
    where
        H: Handler<T, Facilitator>,
        T: 'static,
    {
        self.add(HttpMethod::Get, path, axum::routing::get(handler), op)
    }

    /// `POST path`, answered by `handler`, described by `op`.
    pub(crate) fn post<H, T>(&mut self, path: &'static str, handler: H, op: Op) -> &mut Self
    where
        H: Handler<T, Facilitator>,
        T: 'static,
    {
        self.add(HttpMethod::Post, path, axum::routing::post(handler), op)
    }

    /// `PATCH path`, answered by `handler`, described by `op`.
    pub(crate) fn patch<H, T>(&mut self, path: &'static str, handler: H, op: Op) -> &mut Self
    where
        H: Handler<T, Facilitator>,
        T: 'static,
    {
        self.add(HttpMethod::Patch, path, axum::routing::patch(handler), op)
    }

    /// `DELETE path`, answered by `handler`, described by `op`.
    pub(crate) fn delete<H, T>(&mut self, path: &'static str, handler: H, op: Op) -> &mut Self
    where
        H: Handler<T, Facilitator>,
        T: 'static,
    {
        self.add(HttpMethod::Delete, path, axum::routing::delete(handler), op)
    }

    fn add(
        &mut self,
        method: HttpMethod,
        path: &'static str,
        route: MethodRouter<Facilitator>,
        op: Op,
    ) -> &mut Self {
        // A second method on a path merges into the path's method router.
        self.router = std::mem::take(&mut self.router).route(path, route);
        self.doc.add(method, path, op);
        if !self.paths.contains(&path) {
            self.paths.push(path);
        }
        self
    }

    /// The router of every route (without state, fallbacks or layers).
    pub(crate) fn router(self) -> Router<Facilitator> {
        self.router
    }

    /// The operations and the schemas they refer to.
    pub(crate) fn doc(self) -> Doc {
        self.doc
    }

    /// Every path template, in the order declared.
    pub(crate) fn paths(self) -> Vec<&'static str> {
        self.paths
    }
}
