//! `dataset` binding: look a record up in a JSON array loaded into memory at start-up.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::{CapabilityError, NotFoundPolicy};

/// An in-memory index of the dataset file, keyed by the canonical JSON text of each record's key
/// value. Using the JSON text (not a lossy string conversion) keeps types apart: the string `"1"`
/// and the number `1` are different keys, exactly as JSON Schema would see them.
#[derive(Debug)]
pub(crate) struct DatasetBinding {
    pub(crate) input_field: String,
    /// Each record as a lookup returns it: projected onto the output schema's properties when
    /// the binding projects, and checked against the output schema, at load time.
    pub(crate) records: HashMap<String, Value>,
    pub(crate) not_found: NotFoundPolicy,
}

/// The index key for a record or input value; only scalars can be keys.
pub(crate) fn key_of(value: &Value) -> Option<String> {
    match value {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => Some(value.to_string()),
        _ => None,
    }
}

/// Keeps only the named top-level properties of an object record.
pub(crate) fn project(record: &Value, properties: &[String]) -> Value {
    match record {
        Value::Object(fields) => {
            let kept: Map<String, Value> = properties
                .iter()
                .filter_map(|p| fields.get(p).map(|v| (p.clone(), v.clone())))
                .collect();
            Value::Object(kept)
        }
        other => other.clone(),
    }
}

impl DatasetBinding {
    pub(crate) fn lookup(&self, capability: &str, args: &Value) -> Result<Value, CapabilityError> {
        // Presence and type were checked against the input schema by the caller, and the loader
        // made sure `input_field` is a required property, so a miss here is a caller bug we still
        // report cleanly rather than panic on.
        let wanted = args
            .get(&self.input_field)
            .and_then(key_of)
            .ok_or_else(|| CapabilityError::InvalidArguments {
                capability: capability.to_owned(),
                message: format!(
                    "`{}` must be present and be a string, number or boolean",
                    self.input_field
                ),
            })?;
        match self.records.get(&wanted) {
            Some(record) => Ok(record.clone()),
            None => match &self.not_found {
                NotFoundPolicy::Result(value) => Ok(value.clone()),
                NotFoundPolicy::Error => Err(CapabilityError::NotFound {
                    capability: capability.to_owned(),
                    message: format!("no record with {} = {wanted}", self.input_field),
                }),
            },
        }
    }
}
