//! Which column types count as the same across files, and the one type they are read as.
//!
//! Writers disagree on details that do not change the values: the name of a list's child
//! field (`item` from Arrow and legacy writers, `element` from compliant ones), whether a column
//! is dictionary-encoded, and nullability. Those are accepted; every other difference is not.

use std::sync::Arc;

use arrow_schema::{DataType, Field, FieldRef, Fields};

/// Why a column of type `here` cannot be read as `reference`, or `None` when the two hold the
/// same values: equal up to nested field names and nullability, with a dictionary equal to its
/// value type.
pub(crate) fn type_difference(here: &DataType, reference: &DataType) -> Option<String> {
    if same_values(here, reference) {
        return None;
    }
    let mut reason = format!("{here} here but {reference} in the reference");
    if let Some(inner) = inner_difference(here, reference) {
        reason.push_str(&format!(" ({inner})"));
    }
    Some(reason)
}

/// The type two equivalent types are read as: the reference's, with nullability widened
/// wherever either is nullable, and dictionaries decoded to their values where the two differ
/// in encoding (a dictionary in every file stays one).
///
/// Only meaningful when [`type_difference`] found none.
pub(crate) fn unify(reference: &DataType, other: &DataType) -> DataType {
    if reference == other {
        return reference.clone();
    }
    match (reference, other) {
        (DataType::Dictionary(key, value), DataType::Dictionary(other_key, other_value))
            if key == other_key =>
        {
            DataType::Dictionary(key.clone(), Box::new(unify(value, other_value)))
        }
        (DataType::Dictionary(_, value), _) => unify(value, other),
        (_, DataType::Dictionary(_, value)) => unify(reference, value),
        (DataType::List(field), DataType::List(other)) => DataType::List(unify_field(field, other)),
        (DataType::LargeList(field), DataType::LargeList(other)) => {
            DataType::LargeList(unify_field(field, other))
        }
        (DataType::FixedSizeList(field, size), DataType::FixedSizeList(other, _)) => {
            DataType::FixedSizeList(unify_field(field, other), *size)
        }
        (DataType::Map(field, sorted), DataType::Map(other, _)) => {
            DataType::Map(unify_field(field, other), *sorted)
        }
        (DataType::Struct(fields), DataType::Struct(others)) => DataType::Struct(
            fields
                .iter()
                .zip(others.iter())
                .map(|(field, other)| unify_field(field, other))
                .collect::<Fields>(),
        ),
        _ => reference.clone(),
    }
}

fn unify_field(reference: &FieldRef, other: &FieldRef) -> FieldRef {
    Arc::new(
        Field::new(
            reference.name(),
            unify(reference.data_type(), other.data_type()),
            reference.is_nullable() || other.is_nullable(),
        )
        .with_metadata(reference.metadata().clone()),
    )
}

fn same_values(here: &DataType, reference: &DataType) -> bool {
    match (here, reference) {
        (DataType::Dictionary(_, value), _) => same_values(value, reference),
        (_, DataType::Dictionary(_, value)) => same_values(here, value),
        (DataType::List(a), DataType::List(b))
        | (DataType::LargeList(a), DataType::LargeList(b)) => {
            same_values(a.data_type(), b.data_type())
        }
        (DataType::FixedSizeList(a, n), DataType::FixedSizeList(b, m)) => {
            n == m && same_values(a.data_type(), b.data_type())
        }
        // Map entries are matched by position: their key and value names vary by writer too.
        (DataType::Map(a, sorted_a), DataType::Map(b, sorted_b)) => {
            sorted_a == sorted_b && same_children(a.data_type(), b.data_type(), false)
        }
        (DataType::Struct(_), DataType::Struct(_)) => same_children(here, reference, true),
        _ => here == reference,
    }
}

/// Struct children agree: as many, the same types in the same order, and the same names when
/// `named` (a struct's field names are data; a map entry's are not).
fn same_children(here: &DataType, reference: &DataType, named: bool) -> bool {
    let (DataType::Struct(a), DataType::Struct(b)) = (here, reference) else {
        return false;
    };
    a.len() == b.len()
        && a.iter().zip(b.iter()).all(|(a, b)| {
            (!named || a.name() == b.name()) && same_values(a.data_type(), b.data_type())
        })
}

/// For nested types, which part differs, in words.
fn inner_difference(here: &DataType, reference: &DataType) -> Option<String> {
    match (here, reference) {
        (DataType::List(a), DataType::List(b))
        | (DataType::LargeList(a), DataType::LargeList(b))
        | (DataType::FixedSizeList(a, _), DataType::FixedSizeList(b, _)) => Some(format!(
            "the list values are {} here but {} in the reference",
            a.data_type(),
            b.data_type()
        )),
        (DataType::Struct(a), DataType::Struct(b)) => {
            let names = |fields: &Fields| -> Vec<String> {
                fields.iter().map(|field| field.name().clone()).collect()
            };
            if names(a) != names(b) {
                return Some(format!(
                    "the struct fields are [{}] here but [{}] in the reference",
                    names(a).join(", "),
                    names(b).join(", ")
                ));
            }
            a.iter()
                .zip(b.iter())
                .find(|(a, b)| !same_values(a.data_type(), b.data_type()))
                .map(|(a, b)| {
                    format!(
                        "struct field {:?} is {} here but {} in the reference",
                        a.name(),
                        a.data_type(),
                        b.data_type()
                    )
                })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(child: &str, kind: DataType, nullable: bool) -> DataType {
        DataType::List(Arc::new(Field::new(child, kind, nullable)))
    }

    fn dictionary(value: DataType) -> DataType {
        DataType::Dictionary(Box::new(DataType::Int32), Box::new(value))
    }

    #[test]
    fn list_child_names_and_nullability_do_not_matter() {
        let legacy = list("item", DataType::Int64, false);
        let compliant = list("element", DataType::Int64, true);
        assert_eq!(type_difference(&compliant, &legacy), None);
        assert_eq!(
            unify(&legacy, &compliant),
            list("item", DataType::Int64, true)
        );
    }

    #[test]
    fn a_dictionary_is_its_values_and_mixed_encodings_read_plain() {
        let plain = list("item", DataType::Utf8, true);
        let encoded = list("element", dictionary(DataType::Utf8), true);
        assert_eq!(type_difference(&encoded, &plain), None);
        assert_eq!(unify(&plain, &encoded), plain);
        assert_eq!(
            unify(&dictionary(DataType::Utf8), &dictionary(DataType::Utf8)),
            dictionary(DataType::Utf8)
        );
        let narrow = DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8));
        assert_eq!(unify(&dictionary(DataType::Utf8), &narrow), DataType::Utf8);
    }

    #[test]
    fn other_differences_are_named_down_to_the_nested_part() {
        assert_eq!(
            type_difference(&DataType::Float64, &DataType::Float32).unwrap(),
            "Float64 here but Float32 in the reference"
        );
        let difference = type_difference(
            &list("element", DataType::Int32, true),
            &list("item", DataType::Int64, true),
        )
        .unwrap();
        assert!(
            difference.ends_with("(the list values are Int32 here but Int64 in the reference)"),
            "{difference}"
        );
        let point = |y: &str| {
            DataType::Struct(Fields::from(vec![
                Field::new("x", DataType::Float32, false),
                Field::new(y, DataType::Float32, false),
            ]))
        };
        let difference = type_difference(&point("z"), &point("y")).unwrap();
        assert!(
            difference.contains("[x, z] here but [x, y]"),
            "{difference}"
        );
        assert!(type_difference(&dictionary(DataType::Int64), &DataType::Utf8).is_some());
    }
}
