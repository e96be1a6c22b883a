//! shell: quoting a word for sh, so that a command sluice prints can be
//! pasted as printed. Pure text; knows nothing of sluice.

/// Nothing a shell would read as special.
pub(crate) fn plain(v: &str) -> bool {
    !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:=+,@".contains(&b))
}

/// Single-quotes a value for sh (inside '…' nothing is special but ').
pub(crate) fn sh_quote(v: &str) -> String {
    if plain(v) {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_what_a_shell_would_read() {
        assert_eq!(sh_quote("/a b/it's"), r"'/a b/it'\''s'");
        assert_eq!(sh_quote("/plain/path.pem"), "/plain/path.pem");
        assert_eq!(sh_quote("$(x)"), "'$(x)'");
        assert_eq!(sh_quote(""), "''");
    }
}
