//! The vocabulary the operations are written in: [`Op`], one operation under construction
//! (its parameters, body, answers and the schemas they refer to), and [`Doc`], the paths and
//! schemas collected so far.

use tollgate_protocol::{ApiErrorBody, PendingResponse, openapi::Hash32};
use utoipa::{
    IntoParams, ToSchema,
    openapi::{
        ContentBuilder, HttpMethod, Paths, Ref, RefOr, Required, ResponseBuilder,
        header::HeaderBuilder,
        path::{OperationBuilder, Parameter, ParameterBuilder, ParameterIn},
        request_body::RequestBodyBuilder,
        response::Response,
        schema::{ArrayBuilder, ObjectBuilder, Schema, Type},
        security::SecurityRequirement,
    },
};

use super::{API_KEY, SESSION, errors::error_name, integers};

/// The paths and the schemas they refer to, as they are collected.
#[derive(Default)]
pub(crate) struct Doc {
    pub(crate) paths: Paths,
    pub(crate) schemas: Vec<(String, RefOr<Schema>)>,
}

impl Doc {
    /// Adds `op` at `method path`, with the schemas it refers to.
    pub(crate) fn add(&mut self, method: HttpMethod, path: &'static str, op: Op) {
        self.schemas.extend(op.schemas);
        self.paths
            .add_path_operation(path, vec![method], op.operation.build());
    }
}

/// One operation under construction: its statuses are added in order, and the schemas it
/// refers to are collected for the components.
pub(crate) struct Op {
    operation: OperationBuilder,
    schemas: Vec<(String, RefOr<Schema>)>,
}

/// An operation with an id, a tag and a summary; every operation can be refused by the server's
/// limits (408, 429).
pub(crate) fn op(id: &str, tag: &str, summary: &str) -> Op {
    Op {
        operation: OperationBuilder::new()
            .operation_id(Some(id))
            .tag(tag)
            .summary(Some(summary)),
        schemas: Vec::new(),
    }
}

impl Op {
    /// A longer description than the summary.
    pub(crate) fn description(mut self, description: &str) -> Self {
        self.operation = self.operation.description(Some(description));
        self
    }

    /// A `$ref` to `T`, collecting `T` and what it refers to.
    pub(crate) fn schema<T: ToSchema>(&mut self) -> RefOr<Schema> {
        let from = self.schemas.len();
        self.schemas.push((T::name().into_owned(), T::schema()));
        T::schemas(&mut self.schemas);
        for (_, schema) in &mut self.schemas[from..] {
            integers::bound(schema);
        }
        Ref::from_schema_name(T::name()).into()
    }

    /// A required JSON body of type `T` (400 for malformed JSON or a bad field, 413, 415).
    pub(crate) fn body<T: ToSchema>(self) -> Self {
        self.json_body::<T>(Required::True).errors(&[400, 413, 415])
    }

    /// An optional JSON body of type `T`, read whatever its content type (400 for malformed
    /// JSON or a bad field, 413).
    pub(crate) fn optional_body<T: ToSchema>(self) -> Self {
        self.json_body::<T>(Required::False).errors(&[400, 413])
    }

    fn json_body<T: ToSchema>(mut self, required: Required) -> Self {
        let schema = self.schema::<T>();
        self.operation = self.operation.request_body(Some(
            RequestBodyBuilder::new()
                .required(Some(required))
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(schema)).build(),
                )
                .build(),
        ));
        self
    }

    /// The query parameters of `T` (400 when they do not parse).
    pub(crate) fn query<T: IntoParams>(mut self) -> Self {
        let mut parameters = T::into_params(|| Some(ParameterIn::Query));
        for schema in parameters.iter_mut().filter_map(|p| p.schema.as_mut()) {
            integers::bound(schema);
        }
        self.operation = self.operation.parameters(Some(parameters));
        self.errors(&[400])
    }

    /// A path parameter (400 when it does not decode, 404 when nothing has it).
    pub(crate) fn path(
        mut self,
        name: &str,
        description: &str,
        schema: impl Into<RefOr<Schema>>,
    ) -> Self {
        self.operation = self.operation.parameter(
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .description(Some(description))
                .schema(Some(schema)),
        );
        self.errors(&[400, 404])
    }

    /// A 32-byte path parameter.
    pub(crate) fn hash_path(self, name: &str, description: &str) -> Self {
        self.path(name, description, Ref::from_schema_name(Hash32::name()))
            .with_schema::<Hash32>()
    }

    pub(crate) fn with_schema<T: ToSchema>(mut self) -> Self {
        self.schema::<T>();
        self
    }

    /// A header parameter.
    pub(crate) fn header(mut self, parameter: Parameter) -> Self {
        self.operation = self.operation.parameter(parameter);
        self
    }

    /// Needs a provider API key (401 without a valid one).
    pub(crate) fn secured(mut self) -> Self {
        self.operation = self
            .operation
            .security(SecurityRequirement::new::<_, _, String>(API_KEY, []));
        self.errors(&[401])
    }

    /// Needs a provider API key or the dashboard's session cookie (401 for an unknown key; the
    /// caller answers the absence of both).
    pub(crate) fn secured_or_session(mut self) -> Self {
        self.operation = self
            .operation
            .security(SecurityRequirement::new::<_, _, String>(API_KEY, []))
            .security(SecurityRequirement::new::<_, _, String>(SESSION, []));
        self.errors(&[401])
    }

    /// A JSON answer of type `T` with this status.
    pub(crate) fn ok<T: ToSchema>(mut self, status: u16, description: &str) -> Self {
        let schema = self.schema::<T>();
        self.respond(status, json_response(description, schema))
    }

    /// A JSON answer that is an array of `T`.
    pub(crate) fn ok_list<T: ToSchema>(mut self, status: u16, description: &str) -> Self {
        let item = self.schema::<T>();
        let schema: Schema = ArrayBuilder::new().items(item).into();
        self.respond(status, json_response(description, schema))
    }

    /// An answer without a body.
    pub(crate) fn empty(self, status: u16, description: &str) -> Self {
        self.respond(
            status,
            ResponseBuilder::new().description(description).build(),
        )
    }

    pub(crate) fn respond(mut self, status: u16, response: Response) -> Self {
        self.operation = self.operation.response(status.to_string(), response);
        self
    }

    /// The error responses with these statuses, in the [`ApiErrorBody`] shape; the server's
    /// limits (408, 429) always apply.
    pub(crate) fn errors(mut self, statuses: &[u16]) -> Self {
        self.schema::<ApiErrorBody>();
        for status in statuses.iter().chain(&[408, 429]) {
            self.operation = self.operation.response(
                status.to_string(),
                Ref::from_response_name(error_name(*status)),
            );
        }
        self
    }

    /// The 202 of a settlement broadcast but not yet confirmed (with `Location` on `/authorize`).
    pub(crate) fn pending(mut self, location: bool) -> Self {
        let schema = self.schema::<PendingResponse>();
        let mut response = ResponseBuilder::new()
            .description("Broadcast but not yet confirmed: poll `statusUrl`.")
            .content(
                "application/json",
                ContentBuilder::new().schema(Some(schema)).build(),
            );
        if location {
            response = response.header(
                "Location",
                HeaderBuilder::new()
                    .schema(Some(string("The status URL.")))
                    .build(),
            );
        }
        self.respond(202, response.build())
    }

    /// The dashboard login form's body.
    pub(crate) fn form_body(mut self) -> Self {
        let schema: Schema = ObjectBuilder::new()
            .property("apiKey", string("The provider API key."))
            .required("apiKey")
            .into();
        self.operation = self.operation.request_body(Some(
            RequestBodyBuilder::new()
                .required(Some(Required::True))
                .content(
                    "application/x-www-form-urlencoded",
                    ContentBuilder::new().schema(Some(schema)).build(),
                )
                .build(),
        ));
        self
    }
}

/// A JSON answer with this schema.
pub(crate) fn json_response(description: &str, schema: impl Into<RefOr<Schema>>) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new().schema(Some(schema)).build(),
        )
        .build()
}

/// An HTML answer.
pub(crate) fn html(description: &str) -> Response {
    text("text/html", description)
}

/// A text answer of this content type.
pub(crate) fn text(content_type: &str, description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            content_type,
            ContentBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::String).build()))
                .build(),
        )
        .build()
}

/// `{"type": "string"}` with a description.
pub(crate) fn string(description: &str) -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .into()
}
