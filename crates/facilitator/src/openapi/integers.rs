//! The bounds of unsigned integers, written out.
//!
//! utoipa writes a Rust `u8`, `u16`, `u32` or `u64` as an integer with `minimum: 0` and a format
//! naming its width (under its `non_strict_integers` feature, which `tollgate-protocol`'s
//! `openapi` feature turns on; without it a `u64` would claim `int64` and a `u32` `int32`, whose
//! ranges stop short of what the server reads). JSON Schema gives those formats no meaning, so
//! validators and fuzzers would read no upper bound into them: [`bound`] adds each width's
//! `maximum` (and spells the format `uint64`, where utoipa 6 writes `u-int64`), so that a value
//! the server's integer type cannot hold lies outside the schema too.

use utoipa::openapi::{
    RefOr,
    schema::{AdditionalProperties, ArrayItems, Schema, SchemaFormat},
};

/// Writes out the `maximum` of every unsigned integer in `schema`, at any depth.
pub(super) fn bound(schema: &mut RefOr<Schema>) {
    let RefOr::T(schema) = schema else {
        return;
    };
    match schema {
        Schema::Object(object) => {
            if let Some((name, max)) = object.format.as_ref().and_then(unsigned) {
                object.format = Some(SchemaFormat::Custom(name.into()));
                object.maximum.get_or_insert(max.into());
            }
            object.properties.values_mut().for_each(bound);
            if let Some(AdditionalProperties::RefOr(values)) =
                object.additional_properties.as_deref_mut()
            {
                bound(values);
            }
        }
        Schema::Array(array) => {
            if let ArrayItems::RefOrSchema(items) = &mut array.items {
                bound(items);
            }
        }
        Schema::OneOf(one_of) => one_of.items.iter_mut().for_each(bound),
        Schema::AllOf(all_of) => all_of.items.iter_mut().for_each(bound),
        Schema::AnyOf(any_of) => any_of.items.iter_mut().for_each(bound),
        _ => {}
    }
}

/// The name and the largest value of an unsigned integer format. Matched by the name the format
/// serializes to, which does not depend on utoipa's features.
fn unsigned(format: &SchemaFormat) -> Option<(&'static str, usize)> {
    let name = serde_json::to_value(format).ok()?;
    let (name, max) = match name.as_str()? {
        "u-int8" | "uint8" => ("uint8", u64::from(u8::MAX)),
        "u-int16" | "uint16" => ("uint16", u64::from(u16::MAX)),
        "u-int32" | "uint32" => ("uint32", u64::from(u32::MAX)),
        "u-int64" | "uint64" => ("uint64", u64::MAX),
        _ => return None,
    };
    // A 32-bit host cannot say the larger bounds exactly; it leaves them out.
    Some((name, usize::try_from(max).ok()?))
}

#[cfg(test)]
mod tests {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Type};

    use super::*;

    #[test]
    fn unsigned_formats_get_their_maximum_and_signed_ones_do_not() {
        let mut schema: RefOr<Schema> = ObjectBuilder::new()
            .property(
                "n",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::Custom("u-int32".into())))
                    .minimum(Some(0)),
            )
            .property(
                "i",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64))),
            )
            .into();
        bound(&mut schema);
        let json = serde_json::to_value(&schema).unwrap();
        assert_eq!(json["properties"]["n"]["format"], "uint32");
        assert_eq!(json["properties"]["n"]["maximum"], u32::MAX);
        assert_eq!(json["properties"]["i"]["format"], "int64");
        assert!(json["properties"]["i"].get("maximum").is_none());
    }
}
