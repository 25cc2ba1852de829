//! The one canonical string form of a static key, shared by the bake step and the
//! serving lookup.
//!
//! The form is `field=value` pairs in the kernel's declared key order, joined by
//! `,`: `dtype=bf16,cols=4096`. Integers are written in decimal with no sign or
//! padding; names as they are.

use std::fmt::{self, Write};

use crate::{KernelSchema, Value};

/// Most key fields any kernel has (moe has five).
pub const MAX_KEY_FIELDS: usize = 8;

/// A static key's values in the kernel's key order, held inline (no allocation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValues {
    len: usize,
    items: [Value; MAX_KEY_FIELDS],
}

impl KeyValues {
    pub const fn new() -> Self {
        KeyValues {
            len: 0,
            items: [const { Value::Int(0) }; MAX_KEY_FIELDS],
        }
    }

    /// Appends a value; panics past [`MAX_KEY_FIELDS`], which no schema reaches.
    pub fn push(mut self, v: impl Into<Value>) -> Self {
        assert!(
            self.len < MAX_KEY_FIELDS,
            "static key has more than {MAX_KEY_FIELDS} fields"
        );
        self.items[self.len] = v.into();
        self.len += 1;
        self
    }

    pub fn as_slice(&self) -> &[Value] {
        &self.items[..self.len]
    }
}

impl Default for KeyValues {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes the canonical form of `values` (in `schema.key` order) into `out`.
pub fn write_canonical(schema: &KernelSchema, values: &[Value], out: &mut impl Write) -> fmt::Result {
    if values.len() != schema.key.len() {
        return Err(fmt::Error);
    }
    for (i, (field, value)) in schema.key.iter().zip(values).enumerate() {
        if i > 0 {
            out.write_char(',')?;
        }
        out.write_str(field.name)?;
        out.write_char('=')?;
        match value {
            Value::Int(v) => write!(out, "{v}")?,
            Value::Str(s) => out.write_str(s)?,
        }
    }
    Ok(())
}

/// A fixed-size stack buffer the serving path formats its key into.
pub struct KeyBuf {
    len: usize,
    bytes: [u8; 128],
}

impl KeyBuf {
    pub const fn new() -> Self {
        KeyBuf {
            len: 0,
            bytes: [0; 128],
        }
    }

    pub fn as_str(&self) -> &str {
        // Only whole `&str`s are ever copied in, so the prefix is valid UTF-8.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

impl Default for KeyBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for KeyBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > self.bytes.len() {
            return Err(fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// An owned, validated static key: its values and canonical string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StaticKey {
    canonical: String,
    values: Vec<Value>,
}

impl StaticKey {
    /// Builds a key from values in `schema.key` order, checking each field's type.
    pub fn new(schema: &KernelSchema, values: Vec<Value>) -> Result<StaticKey, String> {
        if values.len() != schema.key.len() {
            return Err(format!(
                "kernel `{}` takes key fields [{}], got {} values",
                schema.kernel,
                schema.key_names().collect::<Vec<_>>().join(", "),
                values.len()
            ));
        }
        for (f, v) in schema.key.iter().zip(&values) {
            f.check(v)?;
        }
        let mut canonical = String::new();
        write_canonical(schema, &values, &mut canonical).map_err(|_| "key does not format".to_string())?;
        Ok(StaticKey { canonical, values })
    }

    /// A key whose values are taken as they are (validating a file with no kernel schema).
    pub(crate) fn untyped(schema: &KernelSchema, values: Vec<Value>) -> StaticKey {
        let mut canonical = String::new();
        // Writing to a String cannot fail and the length matches the schema by construction.
        let _ = write_canonical(schema, &values, &mut canonical);
        StaticKey { canonical, values }
    }

    /// Builds a key from `name=value` pairs in any order (the CLI's form). Every key
    /// field must be given exactly once; integers are parsed for `Int` fields.
    pub fn from_pairs<'a>(
        schema: &KernelSchema,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<StaticKey, String> {
        let mut slots: Vec<Option<Value>> = vec![None; schema.key.len()];
        for (name, raw) in pairs {
            let idx = schema.key.iter().position(|f| f.name == name).ok_or_else(|| {
                format!(
                    "kernel `{}` has no key field `{name}` (fields: {})",
                    schema.kernel,
                    schema.key_names().collect::<Vec<_>>().join(", ")
                )
            })?;
            if slots[idx].is_some() {
                return Err(format!("key field `{name}` given twice"));
            }
            let value = match schema.key[idx].kind {
                crate::FieldKind::Int => Value::Int(
                    raw.parse::<i64>()
                        .map_err(|_| format!("key field `{name}` must be an integer, got `{raw}`"))?,
                ),
                _ => Value::Str(raw.to_string().into()),
            };
            slots[idx] = Some(value);
        }
        let values = slots
            .into_iter()
            .zip(schema.key)
            .map(|(v, f)| v.ok_or_else(|| format!("missing key field `{}`", f.name)))
            .collect::<Result<Vec<_>, _>>()?;
        StaticKey::new(schema, values)
    }

    pub fn as_str(&self) -> &str {
        &self.canonical
    }

    pub fn values(&self) -> &[Value] {
        &self.values
    }
}

impl fmt::Display for StaticKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Field;

    static S: KernelSchema = KernelSchema {
        kernel: "gemm",
        key: &[
            Field::dtype("dtype"),
            Field::name("layout"),
            Field::int("n"),
            Field::int("k"),
        ],
        params: &[],
    };

    #[test]
    fn canonical_form_is_declared_order() {
        let k = StaticKey::from_pairs(
            &S,
            [("k", "4096"), ("dtype", "bf16"), ("n", "6144"), ("layout", "nt")],
        )
        .unwrap();
        assert_eq!(k.as_str(), "dtype=bf16,layout=nt,n=6144,k=4096");
        let mut buf = KeyBuf::new();
        write_canonical(&S, k.values(), &mut buf).unwrap();
        assert_eq!(buf.as_str(), k.as_str());
    }

    #[test]
    fn bad_pairs_name_the_field() {
        let e = StaticKey::from_pairs(&S, [("dtype", "bf16"), ("n", "1")]).unwrap_err();
        assert!(e.contains("missing key field `layout`"), "{e}");
        let e = StaticKey::from_pairs(&S, [("rows", "1")]).unwrap_err();
        assert!(e.contains("no key field `rows`"), "{e}");
        let e = StaticKey::from_pairs(&S, [("dtype", "bf16"), ("layout", "nt"), ("n", "x"), ("k", "1")])
            .unwrap_err();
        assert!(e.contains("`n` must be an integer, got `x`"), "{e}");
        let e = StaticKey::from_pairs(&S, [("dtype", "int4"), ("layout", "nt"), ("n", "1"), ("k", "1")])
            .unwrap_err();
        assert!(e.contains("`dtype` must be a dtype"), "{e}");
        let e = StaticKey::from_pairs(&S, [("dtype", "f16"), ("dtype", "f16")]).unwrap_err();
        assert!(e.contains("given twice"), "{e}");
    }

    #[test]
    fn keybuf_refuses_overflow() {
        let mut b = KeyBuf::new();
        assert!(b.write_str(&"x".repeat(200)).is_err());
    }
}
