//! `dataset` binding: look a record up in a JSON array loaded into memory at start-up.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use crate::file::DatasetSpec;
use crate::load::{Ctx, Schemas, not_found_policy};
use crate::{CapabilityError, LoadError, NotFoundPolicy, schema_errors};

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

/// Builds the binding from its file section: the input field must be a required input
/// property, and every record is indexed, projected and checked against the output schema now,
/// so that a lookup can never fail output validation later.
pub(crate) fn load(
    ctx: &Ctx<'_>,
    spec: DatasetSpec,
    schemas: &Schemas<'_>,
    base_dir: &Path,
) -> Result<DatasetBinding, LoadError> {
    let input_field = spec.input.unwrap_or_else(|| spec.key.clone());
    let input_key = "binding.input";
    if !schemas.input_property(&input_field) {
        return Err(ctx.err(
            input_key,
            format!("input field `{input_field}` is not a property of input_schema"),
        ));
    }
    if !schemas.input_required(&input_field) {
        return Err(ctx.err(
            input_key,
            format!("input field `{input_field}` must be listed in input_schema.required"),
        ));
    }
    let projection = if spec.project {
        let props = schemas
            .output
            .get("properties")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                ctx.err(
                    "binding.project",
                    "projection needs top-level `properties` in output_schema",
                )
            })?;
        Some(props.keys().cloned().collect::<Vec<_>>())
    } else {
        None
    };
    let not_found = not_found_policy(ctx, spec.not_found, schemas)?;
    let path = base_dir.join(&spec.file);
    let items = read_records(ctx, &path)?;
    let records = index(ctx, &spec.key, &path, items, projection.as_deref(), schemas)?;
    Ok(DatasetBinding {
        input_field,
        records,
        not_found,
    })
}

/// The records of a dataset file: a JSON array.
fn read_records(ctx: &Ctx<'_>, path: &Path) -> Result<Vec<Value>, LoadError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| {
        ctx.err(
            "binding.file",
            format!("cannot read dataset file {shown}: {e}"),
        )
    })?;
    let data: Value = serde_json::from_str(&text).map_err(|e| {
        ctx.err(
            "binding.file",
            format!("dataset file {shown} is not valid JSON: {e}"),
        )
    })?;
    match data {
        Value::Array(items) => Ok(items),
        _ => Err(ctx.err(
            "binding.file",
            format!("dataset file {shown} must hold a JSON array of records"),
        )),
    }
}

/// Indexes records by their `key` field, each kept as a lookup returns it and checked now.
fn index(
    ctx: &Ctx<'_>,
    key_field: &str,
    path: &Path,
    items: Vec<Value>,
    projection: Option<&[String]>,
    schemas: &Schemas<'_>,
) -> Result<HashMap<String, Value>, LoadError> {
    let shown = path.display();
    let mut records = HashMap::with_capacity(items.len());
    let mut first_at: HashMap<String, usize> = HashMap::new();
    for (i, record) in items.into_iter().enumerate() {
        let key = record.get(key_field).and_then(key_of).ok_or_else(|| {
            ctx.err(
                "binding.key",
                format!(
                    "record #{i} of {shown} has no string, number or boolean field `{key_field}`"
                ),
            )
        })?;
        if let Some(first) = first_at.get(&key) {
            return Err(ctx.err(
                "binding.key",
                format!("record #{i} of {shown} repeats key {key} (first at record #{first})"),
            ));
        }
        let returned = match projection {
            Some(props) => project(&record, props),
            None => record,
        };
        if let Some(message) = schema_errors(schemas.output_validator, &returned) {
            return Err(ctx.err(
                "binding.file",
                format!(
                    "record #{i} of {shown} (key {key}) does not match output_schema: {message}"
                ),
            ));
        }
        first_at.insert(key.clone(), i);
        records.insert(key, returned);
    }
    Ok(records)
}
