//! Kernel-source fingerprints: which source a table was tuned against.
//!
//! A fingerprint covers what the compiler sees, not the comments around it: each file's
//! text is reduced by [`code_text`] (comments removed, trailing whitespace and blank lines
//! dropped, CRLF read as LF) before it is hashed. Rewording a comment in a `.cu` file
//! leaves every table fresh; any change to the code stales them.

/// FNV-1a, 64-bit: tiny, dependency-free and stable across platforms and releases.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The fingerprint of a kernel's source: its files as (name, text) in the order given,
/// each text reduced to its code text (comments removed), each name and text followed by a zero byte.
///
/// ```
/// let f = |text: &str| tuned::fingerprint(&[("k.cu", text)]);
/// let a = f("int x;  // the count\n");
/// assert!(a.starts_with("fnv1a64:"));
/// // Comments, trailing whitespace, blank lines and CRLF do not count...
/// assert_eq!(a, f("// Why x.\n\nint x; /* the count, reworded */\r\n"));
/// // ...the code does.
/// assert_ne!(a, f("int y;  // the count\n"));
/// assert_ne!(a, f("int x = 1;  // the count\n"));
/// // So does the file name: the same text under another name is another source.
/// assert_ne!(a, tuned::fingerprint(&[("other.cu", "int x;\n")]));
/// ```
pub fn fingerprint(files: &[(&str, &str)]) -> String {
    let mut all = Vec::new();
    for (name, text) in files {
        all.extend_from_slice(name.as_bytes());
        all.push(0);
        all.extend_from_slice(code_text(text).as_bytes());
        all.push(0);
    }
    format!("fnv1a64:{:016x}", fnv1a64(&all))
}

/// The part of a CUDA C++ source that a fingerprint covers, as the compiler reads it:
///
/// - CRLF line ends read as LF;
/// - a `//` comment is removed up to its line end (a backslash before the line end
///   continues it onto the next line, as in C); a `/* */` comment becomes one space, as
///   the compiler replaces it, so the line it sits on stays one line;
/// - string and character literals are kept as they are (a `//` inside one is text);
///   a `'` right after a letter or digit is a digit separator (`1'000`), not a literal;
/// - trailing whitespace is dropped, and so is every line left blank, except a blank
///   line after a line ending in `\`, which ends a directive and so is code.
///
/// Each kept line ends with `\n`. Raw string literals (`R"(...)"`) are not recognised;
/// device sources use none.
fn code_text(text: &str) -> String {
    let text = text.replace("\r\n", "\n");
    let stripped = strip_comments(&text);
    let mut out = String::with_capacity(stripped.len());
    let mut continued = false;
    for line in stripped.split('\n') {
        let line = line.trim_end();
        if !line.is_empty() || continued {
            out.push_str(line);
            out.push('\n');
        }
        continued = line.ends_with('\\');
    }
    out
}

/// `text` with each comment removed (`//`) or replaced by one space (`/* */`).
fn strip_comments(text: &str) -> String {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Code,
        Literal(char),
        LineComment,
        BlockComment,
    }
    let mut out = String::with_capacity(text.len());
    let mut state = State::Code;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match state {
            State::Code => match (c, chars.peek()) {
                ('/', Some('/')) => {
                    chars.next();
                    state = State::LineComment;
                }
                ('/', Some('*')) => {
                    chars.next();
                    out.push(' ');
                    state = State::BlockComment;
                }
                ('"', _) => {
                    out.push(c);
                    state = State::Literal('"');
                }
                ('\'', _) => {
                    let separator = out.chars().last().is_some_and(|p| p.is_ascii_alphanumeric());
                    out.push(c);
                    if !separator {
                        state = State::Literal('\'');
                    }
                }
                _ => out.push(c),
            },
            State::Literal(quote) => {
                out.push(c);
                if c == '\\' {
                    // An escaped character (a quote, a backslash, a line end) stays in the literal.
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                } else if c == quote || c == '\n' {
                    state = State::Code;
                }
            }
            State::LineComment => match (c, chars.peek()) {
                ('\\', Some('\n')) => {
                    chars.next();
                }
                ('\n', _) => {
                    out.push('\n');
                    state = State::Code;
                }
                _ => {}
            },
            State::BlockComment => {
                if c == '*' && chars.peek() == Some(&'/') {
                    chars.next();
                    state = State::Code;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_go_and_literals_stay() {
        let cases = [
            (
                "#define N 4 // lanes\n/* A block\n   comment. */\nint a[N]; \n\nconst char* s = \"//x\";\n",
                "#define N 4\nint a[N];\nconst char* s = \"//x\";\n",
            ),
            ("a; // c\n", "a;\n"),
            ("a; /* c */ b;\n", "a;   b;\n"),
            ("a/**/b\n", "a b\n"),
            // A block comment over lines is one space: the directive stays one line.
            ("#define A /* x\n y */ 1\nB\n", "#define A   1\nB\n"),
            // A line comment continued by a backslash takes the next line with it.
            ("a; // c \\\n still comment\nb;\n", "a;\nb;\n"),
            (
                "s = \"// not a comment /* nor this */\";\n",
                "s = \"// not a comment /* nor this */\";\n",
            ),
            ("s = \"a \\\" // b\"; // c\n", "s = \"a \\\" // b\";\n"),
            ("c = '\"'; // \"\n", "c = '\"';\n"),
            ("c = '\\''; d = '/'; // c\n", "c = '\\''; d = '/';\n"),
            ("n = 1'000'000; // c\n", "n = 1'000'000;\n"),
            ("x = a / b / c; // c\n", "x = a / b / c;\n"),
            ("x = a /* c */ / b;\n", "x = a   / b;\n"),
            // Unterminated block comment: the rest is comment.
            ("a; /* c\nb;\n", "a;\n"),
        ];
        for (src, want) in cases {
            assert_eq!(code_text(src), want, "{src:?}");
        }
    }

    #[test]
    fn line_structure_is_kept() {
        let src = "#define F(x) \\\n    /* why */ \\\n    (x + 1)\n\n\nint y;\t \n";
        assert_eq!(code_text(src), "#define F(x) \\\n      \\\n    (x + 1)\nint y;\n");
        // A blank line after a continuation ends the directive: it is kept, so the two
        // meanings below differ.
        assert_ne!(
            code_text("#define A \\\n\nint x;\n"),
            code_text("#define A \\\nint x;\n")
        );
        assert_eq!(code_text("a\r\nb\r\n"), code_text("a\nb\n"));
        assert_eq!(code_text("a"), "a\n");
        assert_eq!(code_text(""), "");
    }

    #[test]
    fn fingerprints_follow_the_code_only() {
        let f = |t: &str| fingerprint(&[("k.cu", t)]);
        let base = f("// old comment\nint k; // why\n");
        assert_eq!(
            base,
            f("// A new, longer comment\n// over two lines.\n\nint k;\n")
        );
        assert_ne!(base, f("int k ;\n"));
        assert_ne!(base, f("int k; int j;\n"));
        // No files: the FNV offset basis, as before the comment rule.
        assert_eq!(fingerprint(&[]), "fnv1a64:cbf29ce484222325");
    }
}
