//! Kernel-source fingerprints: which source a table was tuned against.

/// FNV-1a, 64-bit: tiny, dependency-free and stable across platforms and releases.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The fingerprint of a kernel's source: its files as (name, text) in the order given.
/// Line endings are normalised so a checkout with CRLF gives the same value.
///
/// ```
/// let a = tuned::fingerprint(&[("k.cu", "int x;\n")]);
/// let b = tuned::fingerprint(&[("k.cu", "int x;\r\n")]);
/// assert_eq!(a, b);
/// assert!(a.starts_with("fnv1a64:"));
/// assert_ne!(a, tuned::fingerprint(&[("k.cu", "int y;\n")]));
/// ```
pub fn fingerprint(files: &[(&str, &str)]) -> String {
    let mut all = Vec::new();
    for (name, text) in files {
        all.extend_from_slice(name.as_bytes());
        all.push(0);
        all.extend_from_slice(text.replace("\r\n", "\n").as_bytes());
        all.push(0);
    }
    format!("fnv1a64:{:016x}", fnv1a64(&all))
}
