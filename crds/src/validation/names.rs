//! Kubernetes name syntax: qualified names (label and taint keys) and label values
//! (apimachinery `IsQualifiedName`, `IsValidLabelValue`).

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// Problems with `s` as a Kubernetes qualified name (`[prefix/]name`), empty when valid
/// (apimachinery `IsQualifiedName`).
pub fn qualified_name_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else if let Some(msg) = dns1123_subdomain_error(prefix) {
                errs.push(format!("prefix part {msg}"));
            }
            *name
        }
        _ => {
            errs.push("a qualified name is an optional DNS subdomain prefix and '/' followed by a name, e.g. example.com/MyName".to_string());
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !name.is_empty() && !is_name_part(name) {
        errs.push("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".to_string());
    }
    errs
}

/// Problems with `s` as a Kubernetes label value, empty when valid (apimachinery
/// `IsValidLabelValue`): at most 63 characters, empty or alphanumeric at both ends with
/// `-`, `_`, `.` inside.
pub fn label_value_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !s.is_empty() && !is_name_part(s) {
        errs.push("a valid label value must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".to_string());
    }
    errs
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_name_part(s: &str) -> bool {
    let first_last_ok =
        s.chars().next().is_some_and(is_alnum) && s.chars().last().is_some_and(is_alnum);
    first_last_ok
        && s.chars()
            .all(|c| is_alnum(c) || matches!(c, '-' | '_' | '.'))
}

/// `None` if `s` is a DNS-1123 subdomain (lowercase labels joined by dots, at most 253 chars).
fn dns1123_subdomain_error(s: &str) -> Option<String> {
    if s.len() > 253 {
        return Some("must be no more than 253 characters".to_string());
    }
    let label_ok = |l: &str| {
        let lower_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        l.chars().next().is_some_and(lower_alnum)
            && l.chars().last().is_some_and(lower_alnum)
            && l.chars().all(|c| lower_alnum(c) || c == '-')
    };
    if s.split('.').all(label_ok) {
        None
    } else {
        Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".to_string())
    }
}
