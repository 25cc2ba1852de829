//! The one canonical string form of a static key, shared by the bake step and the
//! serving lookup.
//!
//! The form is `field=value` pairs in the kernel's declared key order, joined by
//! `,`: `dtype=bf16,cols=4096`. Integers are written in decimal with no sign or
//! padding; names as they are.

use std::fmt;

use crate::{Field, KernelSchema, Value};

/// Most key fields any kernel has (moe has five).
pub const MAX_KEY_FIELDS: usize = 8;

/// One key field's value as the serving path holds it: borrowed, `Copy`, no drop glue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyPart<'a> {
    Int(i64),
    Str(&'a str),
}

impl From<i64> for KeyPart<'_> {
    fn from(v: i64) -> Self {
        KeyPart::Int(v)
    }
}

impl<'a> From<&'a str> for KeyPart<'a> {
    fn from(v: &'a str) -> Self {
        KeyPart::Str(v)
    }
}

impl<'a> From<&'a Value> for KeyPart<'a> {
    fn from(v: &'a Value) -> Self {
        match v {
            Value::Int(i) => KeyPart::Int(*i),
            Value::Str(s) => KeyPart::Str(s),
        }
    }
}

/// A static key's values in the kernel's key order, held inline (no allocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyValues {
    len: usize,
    items: [KeyPart<'static>; MAX_KEY_FIELDS],
}

impl KeyValues {
    pub const fn new() -> Self {
        KeyValues {
            len: 0,
            items: [KeyPart::Int(0); MAX_KEY_FIELDS],
        }
    }

    /// Appends a value; panics past [`MAX_KEY_FIELDS`], which no schema reaches.
    pub fn push(mut self, v: impl Into<KeyPart<'static>>) -> Self {
        assert!(
            self.len < MAX_KEY_FIELDS,
            "static key has more than {MAX_KEY_FIELDS} fields"
        );
        self.items[self.len] = v.into();
        self.len += 1;
        self
    }

    pub fn as_slice(&self) -> &[KeyPart<'static>] {
        &self.items[..self.len]
    }
}

impl Default for KeyValues {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a canonical key is written: a `String` (tools) or a [`KeyBuf`] (serving).
pub trait KeySink {
    /// Appends `s`; false when it does not fit.
    fn push_str(&mut self, s: &str) -> bool;
    /// Appends one ASCII byte; false when it does not fit.
    fn push_ascii(&mut self, b: u8) -> bool;
}

impl KeySink for String {
    fn push_str(&mut self, s: &str) -> bool {
        String::push_str(self, s);
        true
    }
    fn push_ascii(&mut self, b: u8) -> bool {
        self.push(b as char);
        true
    }
}

/// Why a key could not be written: the number of parts is not the schema's, or the
/// sink is full (a [`KeyBuf`] holds 128 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the static key does not fit the schema or the key buffer")]
pub struct KeyFormatError;

/// Writes the canonical form of `parts` (in `schema.key` order) into `out`. The one
/// place the form is defined: baking and probing both come through here.
pub fn write_canonical(
    schema: &KernelSchema,
    parts: &[KeyPart<'_>],
    out: &mut impl KeySink,
) -> Result<(), KeyFormatError> {
    if parts.len() != schema.key.len() {
        return Err(KeyFormatError);
    }
    for (i, (field, part)) in schema.key.iter().zip(parts).enumerate() {
        let ok = (i == 0 || out.push_ascii(b','))
            && out.push_str(field.name)
            && out.push_ascii(b'=')
            && match part {
                KeyPart::Int(v) => write_int(*v, out),
                KeyPart::Str(s) => out.push_str(s),
            };
        if !ok {
            return Err(KeyFormatError);
        }
    }
    Ok(())
}

/// Decimal digits of `v` without the formatting machinery (this is on the serving path).
fn write_int(v: i64, out: &mut impl KeySink) -> bool {
    let mut digits = [0u8; 20];
    let mut n = v.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    (v >= 0 || out.push_ascii(b'-')) && digits[i..].iter().all(|&d| out.push_ascii(d))
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
        debug_assert!(std::str::from_utf8(&self.bytes[..self.len]).is_ok());
        // SAFETY: `push_str` copies whole `&str`s and `push_ascii` single ASCII bytes,
        // so `bytes[..len]` is valid UTF-8. This is the serving path, where
        // re-validating costs more than the rest of the key formatting.
        unsafe { std::str::from_utf8_unchecked(&self.bytes[..self.len]) }
    }
}

impl Default for KeyBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl KeySink for KeyBuf {
    fn push_str(&mut self, s: &str) -> bool {
        let end = self.len + s.len();
        match self.bytes.get_mut(self.len..end) {
            Some(dst) => {
                dst.copy_from_slice(s.as_bytes());
                self.len = end;
                true
            }
            None => false,
        }
    }

    fn push_ascii(&mut self, b: u8) -> bool {
        debug_assert!(b.is_ascii());
        match self.bytes.get_mut(self.len) {
            Some(d) if b.is_ascii() => {
                *d = b;
                self.len += 1;
                true
            }
            _ => false,
        }
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
        let parts: Vec<KeyPart<'_>> = values.iter().map(KeyPart::from).collect();
        let mut canonical = String::new();
        write_canonical(schema, &parts, &mut canonical).map_err(|_| "key does not format".to_string())?;
        Ok(StaticKey { canonical, values })
    }

    /// A key whose values are taken as they are (validating a file with no kernel schema).
    pub(crate) fn untyped(schema: &KernelSchema, values: Vec<Value>) -> StaticKey {
        let parts: Vec<KeyPart<'_>> = values.iter().map(KeyPart::from).collect();
        let mut canonical = String::new();
        // Writing to a String cannot fail and the length matches the schema by construction.
        let _ = write_canonical(schema, &parts, &mut canonical);
        StaticKey { canonical, values }
    }

    /// Builds a key from `name=value` pairs in any order (the CLI's form). Every key
    /// field must be given exactly once; integers are parsed for `Int` fields.
    pub fn from_pairs<'a>(
        schema: &KernelSchema,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<StaticKey, String> {
        let values = values_from_pairs(schema, schema.key, "key field", pairs)?;
        StaticKey::new(schema, values)
    }

    /// Parses a key written in the canonical form (`dtype=bf16,cols=4096`, fields in
    /// the schema's order), as baked tables and caches hold it; any other form is refused.
    pub fn parse(schema: &KernelSchema, canonical: &str) -> Result<StaticKey, String> {
        let pairs = canonical
            .split(',')
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")));
        let key = StaticKey::from_pairs(schema, pairs)?;
        if key.canonical != canonical {
            return Err(format!(
                "`{canonical}` is not in canonical form (`{}`)",
                key.canonical
            ));
        }
        Ok(key)
    }

    pub fn as_str(&self) -> &str {
        &self.canonical
    }

    pub fn values(&self) -> &[Value] {
        &self.values
    }
}

/// A config's values in the schema's parameter order from `name=value` pairs in any
/// order (the form `kernels plan` and the benches print a config in): every parameter
/// exactly once, integers parsed for `Int` parameters. The values are not checked
/// against the parameters' domains: the kernel's own config decoding does that.
pub fn config_values_from_pairs<'a>(
    schema: &KernelSchema,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<Value>, String> {
    values_from_pairs(schema, schema.params, "parameter", pairs)
}

/// Values for `fields` (the schema's key or its parameters) from `name=value` pairs in any
/// order: each exactly once, integers parsed for `Int` fields; errors call a field `what`.
fn values_from_pairs<'a>(
    schema: &KernelSchema,
    fields: &[Field],
    what: &str,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<Value>, String> {
    let mut slots: Vec<Option<Value>> = vec![None; fields.len()];
    for (name, raw) in pairs {
        let idx = fields.iter().position(|f| f.name == name).ok_or_else(|| {
            format!(
                "kernel `{}` has no {what} `{name}` ({what}s: {})",
                schema.kernel,
                fields.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
            )
        })?;
        if slots[idx].is_some() {
            return Err(format!("{what} `{name}` given twice"));
        }
        let value = match fields[idx].kind {
            crate::FieldKind::Int => Value::Int(
                raw.parse::<i64>()
                    .map_err(|_| format!("{what} `{name}` must be an integer, got `{raw}`"))?,
            ),
            _ => Value::Str(raw.to_string().into()),
        };
        slots[idx] = Some(value);
    }
    slots
        .into_iter()
        .zip(fields)
        .map(|(v, f)| v.ok_or_else(|| format!("missing {what} `{}`", f.name)))
        .collect()
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
        let parts: Vec<KeyPart<'_>> = k.values().iter().map(KeyPart::from).collect();
        write_canonical(&S, &parts, &mut buf).unwrap();
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
    fn config_pairs_fill_the_parameter_order_and_name_the_parameter() {
        static P: KernelSchema = KernelSchema {
            kernel: "t",
            key: &[Field::int("n")],
            params: &[Field::name("path"), Field::int("threads")],
        };
        let v = config_values_from_pairs(&P, [("threads", "128"), ("path", "row")]).unwrap();
        assert_eq!(v, vec![Value::str("row"), Value::Int(128)]);
        let e = config_values_from_pairs(&P, [("path", "row")]).unwrap_err();
        assert!(e.contains("missing parameter `threads`"), "{e}");
        let e = config_values_from_pairs(&P, [("path", "row"), ("threads", "x")]).unwrap_err();
        assert!(
            e.contains("parameter `threads` must be an integer, got `x`"),
            "{e}"
        );
        let e = config_values_from_pairs(&P, [("path", "a"), ("path", "b")]).unwrap_err();
        assert!(e.contains("parameter `path` given twice"), "{e}");
        let e = config_values_from_pairs(&P, [("n", "1")]).unwrap_err();
        assert!(e.contains("kernel `t` has no parameter `n`"), "{e}");
    }

    #[test]
    fn parse_accepts_only_the_canonical_form() {
        let k = StaticKey::parse(&S, "dtype=bf16,layout=nt,n=6144,k=4096").unwrap();
        assert_eq!(k.values()[2], Value::Int(6144));
        assert!(StaticKey::parse(&S, "layout=nt,dtype=bf16,n=6144,k=4096")
            .unwrap_err()
            .contains("canonical"));
        assert!(StaticKey::parse(&S, "dtype=bf16,layout=nt,n=6144").is_err());
    }

    #[test]
    fn keybuf_refuses_overflow() {
        let mut b = KeyBuf::new();
        assert!(!b.push_str(&"x".repeat(200)));
        assert!(b.push_str("dtype"));
        assert_eq!(b.as_str(), "dtype");
    }
}

#[cfg(test)]
mod int_tests {
    use super::*;

    #[test]
    fn integers_format_like_display() {
        for v in [0i64, 1, 9, 10, 4096, 128256, -7, i64::MAX, i64::MIN] {
            let mut s = String::new();
            assert!(write_int(v, &mut s));
            assert_eq!(s, v.to_string());
        }
    }
}
