//! Machine-readable output shared by the commands: `-o json` indented by 4 spaces as kubectl
//! prints it, `-o yaml` as block YAML with list items flush with their key. Never coloured.

use std::io::{self, Write};

use serde::Serialize;

/// `-o` of the commands that print one report per object (`why-pending`, `drift explain`):
/// human-readable text, or the list of reports as a JSON or YAML document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// One block per object, like `kubectl describe`, and a summary line.
    Text,
    /// A JSON array of reports.
    Json,
    /// The same array as YAML.
    Yaml,
}

/// Why the list could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A NodeClaim or orphan could not be turned into JSON.
    #[error("encoding the output as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The list could not be turned into YAML.
    #[error("encoding the output as YAML: {0}")]
    Yaml(#[from] serde_saphyr::ser_error::Error),
    /// Writing the output failed.
    #[error("writing output: {0}")]
    Io(#[from] io::Error),
}

/// Writes any serializable value (a document, a list of reports) as JSON indented by 4 spaces,
/// as kubectl does, fields in their declared order.
///
/// Errors: serializing or writing failed.
pub fn write_json_value<T: Serialize>(out: &mut impl Write, value: &T) -> Result<(), OutputError> {
    let mut ser = serde_json::Serializer::with_formatter(
        &mut *out,
        serde_json::ser::PrettyFormatter::with_indent(b"    "),
    );
    value.serialize(&mut ser)?;
    writeln!(out)?;
    Ok(())
}

/// Writes any serializable value (a JSON value, a document, a list of reports) as block YAML
/// (2-space indent, list items flush with their key, multi-line strings as `|` blocks).
///
/// Errors: serializing or writing failed.
pub fn write_yaml_value<T: Serialize>(out: &mut impl Write, list: &T) -> Result<(), OutputError> {
    let options = serde_saphyr::ser_options! {
        indent_step: 2,
        compact_list_indent: true,
        // Multi-line strings as `|` blocks, as kubectl prints them; long lines stay unfolded.
        prefer_block_scalars: true,
        folded_wrap_chars: usize::MAX,
    };
    let text = serde_saphyr::to_string_with_options(list, options)?;
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn sample() -> Value {
        json!({
            "apiVersion": "v1",
            "items": [{"name": "default-abcde", "labels": {"karpenter.sh/nodepool": "default"},
                       "conditions": [{"status": "True", "type": "Launched"}]}],
            "empty": "",
        })
    }

    #[test]
    fn json_is_indented_by_four_spaces() {
        let mut out = Vec::new();
        write_json_value(&mut out, &sample()).expect("json");
        let got = String::from_utf8(out).expect("utf-8");
        assert!(got.starts_with("{\n    \"apiVersion\": \"v1\",\n"), "{got}");
        assert!(got.ends_with("}\n"), "{got}");
        let back: Value = serde_json::from_str(&got).expect("parses back");
        assert_eq!(back, sample());
    }

    #[test]
    fn yaml_lists_are_flush_with_their_key() {
        let mut out = Vec::new();
        write_yaml_value(&mut out, &sample()).expect("yaml");
        // A JSON value's keys come sorted.
        let want = r#"apiVersion: v1
empty: ""
items:
- conditions:
  - status: "True"
    type: Launched
  labels:
    karpenter.sh/nodepool: default
  name: default-abcde
"#;
        let got = String::from_utf8(out).expect("utf-8");
        assert_eq!(got, want, "\n{got}");
        let back: Value = serde_saphyr::from_str(&got).expect("yaml parses back");
        assert_eq!(back, sample());
    }

    #[test]
    fn yaml_multiline_strings_are_literal_blocks() {
        let long = "x".repeat(120);
        let value = json!({"script": "line one\nline two\n", "long": long});
        let mut out = Vec::new();
        write_yaml_value(&mut out, &value).expect("yaml");
        let got = String::from_utf8(out).expect("utf-8");
        assert!(got.contains("script: |\n  line one\n  line two\n"), "{got}");
        assert!(got.contains(&format!("long: {long}\n")), "{got}");
    }
}
