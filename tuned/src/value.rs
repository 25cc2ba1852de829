//! Values of key fields and config parameters.

use std::borrow::Cow;
use std::fmt;

/// One key field or config parameter value: an integer or a short name.
///
/// Baked tables hold `Value::Str(Cow::Borrowed(..))`, so values are built in
/// statics with no allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    Int(i64),
    Str(Cow<'static, str>),
}

impl Value {
    pub const fn str(s: &'static str) -> Value {
        Value::Str(Cow::Borrowed(s))
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            Value::Str(_) => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            Value::Int(_) => None,
        }
    }

    /// The value as JSON (integers as numbers, names as strings).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Int(v) => serde_json::Value::from(*v),
            Value::Str(s) => serde_json::Value::from(s.as_ref()),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Str(s) => f.write_str(s),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<&'static str> for Value {
    fn from(v: &'static str) -> Self {
        Value::str(v)
    }
}
