//! What a kernel family declares about its tables: key fields and config parameters.

use std::fmt;

use crate::{DType, Value};

/// The type of a key field or config parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// A non-negative integer.
    Int,
    /// A short lowercase name (`[a-z0-9_]+`).
    Name,
    /// A dtype name (`f32`, `f16`, `bf16`).
    DType,
}

/// A named, typed field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub kind: FieldKind,
}

impl Field {
    pub const fn int(name: &'static str) -> Field {
        Field {
            name,
            kind: FieldKind::Int,
        }
    }
    pub const fn name(name: &'static str) -> Field {
        Field {
            name,
            kind: FieldKind::Name,
        }
    }
    pub const fn dtype(name: &'static str) -> Field {
        Field {
            name,
            kind: FieldKind::DType,
        }
    }

    /// Checks one value against this field's kind; the error names the field and the value.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        match (self.kind, value) {
            (FieldKind::Int, Value::Int(v)) if *v >= 0 => Ok(()),
            (FieldKind::Int, Value::Int(v)) => Err(format!("`{}` must be >= 0, got {v}", self.name)),
            (FieldKind::Name, Value::Str(s)) if is_name(s) => Ok(()),
            (FieldKind::DType, Value::Str(s)) if s.parse::<DType>().is_ok() && is_name(s) => Ok(()),
            (FieldKind::Int, v) => Err(format!("`{}` must be an integer, got `{v}`", self.name)),
            (FieldKind::Name, v) => Err(format!(
                "`{}` must be a lowercase name ([a-z0-9_]+), got `{v}`",
                self.name
            )),
            (FieldKind::DType, v) => Err(format!(
                "`{}` must be a dtype (f32, f16, bf16), got `{v}`",
                self.name
            )),
        }
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The table contract of one kernel: its name, its static-key fields (in canonical
/// order) and its config parameters (in the order tables list them).
#[derive(Debug)]
pub struct KernelSchema {
    pub kernel: &'static str,
    pub key: &'static [Field],
    pub params: &'static [Field],
}

impl KernelSchema {
    pub fn key_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.key.iter().map(|f| f.name)
    }

    pub fn param_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.params.iter().map(|f| f.name)
    }

    /// The position of key field `name`, or an error naming it and the fields there are.
    pub fn key_index(&self, name: &str) -> Result<usize, String> {
        self.key.iter().position(|f| f.name == name).ok_or_else(|| {
            format!(
                "kernel `{}` has no key field `{name}` (fields: {})",
                self.kernel,
                self.key_names().collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// Checks a config (values in `params` order) field by field.
    pub fn check_params(&self, values: &[Value]) -> Result<(), String> {
        if values.len() != self.params.len() {
            return Err(format!(
                "config has {} values, kernel `{}` declares {} parameters",
                values.len(),
                self.kernel,
                self.params.len()
            ));
        }
        self.params.iter().zip(values).try_for_each(|(f, v)| f.check(v))
    }
}

/// The index of parameter `name` in `schema.params`, computed at compile time:
/// `const THREADS: usize = param_index(&RMSNORM, "threads");` fails to compile when
/// the schema has no such parameter.
pub const fn param_index(schema: &KernelSchema, name: &str) -> usize {
    let mut i = 0;
    while i < schema.params.len() {
        if str_eq(schema.params[i].name, name) {
            return i;
        }
        i += 1;
    }
    panic!("the schema has no parameter of that name")
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

fn param_at<'a>(schema: &KernelSchema, values: &'a [Value], index: usize) -> Result<&'a Value, String> {
    if values.len() != schema.params.len() {
        return Err(format!(
            "config has {} values, kernel `{}` declares {}",
            values.len(),
            schema.kernel,
            schema.params.len()
        ));
    }
    values
        .get(index)
        .ok_or_else(|| format!("kernel `{}` has no parameter number {index}", schema.kernel))
}

/// The integer parameter at `index` (see [`param_index`]) of a config, checked to be
/// one of `allowed`; the error names the parameter.
pub fn int_param(
    schema: &KernelSchema,
    values: &[Value],
    index: usize,
    allowed: &[i64],
) -> Result<i64, String> {
    let v = param_at(schema, values, index)?;
    let name = schema.params[index].name;
    match v {
        Value::Int(i) if allowed.contains(i) => Ok(*i),
        Value::Int(i) => Err(format!("`{name}` = {i} is not one of {allowed:?}")),
        Value::Str(_) => Err(format!("`{name}` must be an integer, got `{v}`")),
    }
}

/// The name parameter at `index` of a config, checked to be one of `allowed`.
pub fn name_param(
    schema: &KernelSchema,
    values: &[Value],
    index: usize,
    allowed: &[&'static str],
) -> Result<&'static str, String> {
    let v = param_at(schema, values, index)?;
    let name = schema.params[index].name;
    let s = v
        .as_str()
        .ok_or_else(|| format!("`{name}` must be a name, got `{v}`"))?;
    allowed
        .iter()
        .find(|a| **a == s)
        .copied()
        .ok_or_else(|| format!("`{name}` = `{s}` is not one of {allowed:?}"))
}

/// The value of key field `name` among `values` (in `schema.key` order): an error when
/// the schema has no such field or the values stop before it.
fn key_value<'v>(schema: &KernelSchema, values: &'v [Value], name: &str) -> Result<&'v Value, String> {
    let i = schema
        .key
        .iter()
        .position(|f| f.name == name)
        .ok_or_else(|| format!("kernel `{}` has no key field `{name}`", schema.kernel))?;
    values.get(i).ok_or_else(|| format!("missing key field `{name}`"))
}

/// The integer key field `name` (values in `schema.key` order), checked to lie in `lo..=hi`.
pub fn int_key(schema: &KernelSchema, values: &[Value], name: &str, lo: i64, hi: i64) -> Result<i64, String> {
    let v = key_value(schema, values, name)?;
    let n = v
        .as_int()
        .ok_or_else(|| format!("key field `{name}` must be an integer, got `{v}`"))?;
    if (lo..=hi).contains(&n) {
        Ok(n)
    } else {
        Err(format!("key field `{name}` = {n} is out of range {lo}..={hi}"))
    }
}

/// The dtype key field `name`.
pub fn dtype_key(schema: &KernelSchema, values: &[Value], name: &str) -> Result<DType, String> {
    let v = key_value(schema, values, name)?;
    v.as_str()
        .ok_or_else(|| format!("key field `{name}` must be a dtype, got `{v}`"))?
        .parse::<DType>()
        .map_err(|e| format!("key field `{name}`: {e}"))
}

/// Writes a config as `name=value` pairs separated by single spaces (`threads=256 vec=2
/// rows=1`): the one text form of a config, which every config type's `Display` and
/// `kernels plan` and `lookup` print.
///
/// ```
/// use tuned::{write_config, Value};
/// let mut out = String::new();
/// write_config(&mut out, [("strategy", &Value::str("row")), ("threads", &Value::Int(256))]).unwrap();
/// assert_eq!(out, "strategy=row threads=256");
/// ```
pub fn write_config<'n, 'v, W: fmt::Write + ?Sized>(
    out: &mut W,
    pairs: impl IntoIterator<Item = (&'n str, &'v Value)>,
) -> fmt::Result {
    for (i, (name, value)) in pairs.into_iter().enumerate() {
        if i > 0 {
            out.write_char(' ')?;
        }
        write!(out, "{name}={value}")?;
    }
    Ok(())
}
