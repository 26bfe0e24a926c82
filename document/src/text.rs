//! Plain text inside the report's Markdown fields: a user string (a label, a title, a table
//! cell) escaped so that Markdown reads it as literal text, and an image's alt text. The sinks
//! render the Markdown; a study that builds a section writes its plain strings with [`escape`].

/// `text` as literal inline Markdown: every character with a Markdown meaning (emphasis, code,
/// links, HTML, entities, table pipes, headings, strike-through) is backslash-escaped
/// (CommonMark 0.31, section 2.4: any ASCII punctuation may be escaped), a leading list or
/// block marker is escaped, and line breaks become spaces (the text stays one inline run).
///
/// Parsing the result as a CommonMark paragraph gives back `text` (up to line breaks and
/// leading/trailing blanks, which a paragraph drops).
pub fn escape(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1).copied();
        let escaped = match c {
            '\\' | '`' | '*' | '[' | ']' | '|' | '&' | '~' | '$' => true,
            // An HTML tag or autolink opens with `<` and a letter, `/`, `!` or `?` ("<= 2" is text).
            '<' => next.is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?')),
            // A block quote at the start of a line.
            '>' => i == 0,
            // Between two letters or digits `_` cannot open or close emphasis ("fused_step").
            '_' => {
                !(prev.is_some_and(char::is_alphanumeric)
                    && next.is_some_and(char::is_alphanumeric))
            }
            // A heading at the start of a line.
            '#' => i == 0,
            // A list item ("- x"), thematic break ("---") or setext underline ("==") at the
            // start of a line; a leading minus sign of a number stays as it is.
            '-' | '+' | '=' => i == 0 && next.is_none_or(|n| n.is_whitespace() || n == c),
            // "1. x" or "1) x" at the start would begin an ordered list.
            '.' | ')' => {
                i > 0
                    && chars[..i].iter().all(char::is_ascii_digit)
                    && next.is_none_or(char::is_whitespace)
            }
            _ => false,
        };
        if escaped {
            out.push('\\');
            out.push(c);
        } else if c.is_control() {
            out.push(' '); // line breaks and other controls: the text stays one inline run
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` as an image's alt text in Markdown: as it is when it has no Markdown punctuation,
/// otherwise as one code span (a blog engine shows a backslash escape in alt text literally,
/// and would turn `x*x + 1 and y*y` into emphasis).
pub fn alt_text(text: &str) -> String {
    let plain: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if !plain.contains(['*', '_', '[', ']', '`', '<', '&', '\\']) {
        return plain;
    }
    if plain.contains('`') {
        return escape(&plain);
    }
    format!("`{plain}`")
}
