use super::*;
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A query string of known parameters with odd values, and noise.
fn query() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("limit"),
        Just("continue"),
        Just("resourceVersion"),
        Just("resourceVersionMatch"),
        Just("labelSelector"),
        Just("fieldSelector"),
        Just("timeoutSeconds"),
        Just("watch"),
        Just("sendInitialEvents"),
        Just("allowWatchBookmarks"),
        Just("dryRun"),
        Just("fieldValidation"),
        Just("fieldManager"),
        Just("force"),
        Just("gracePeriodSeconds"),
        Just("propagationPolicy"),
        Just("orphanDependents"),
        Just("x"),
    ];
    let value = prop_oneof![
        "[a-zA-Z0-9%=!,()\\-]{0,12}",
        Just("All".to_owned()),
        Just("Exact".to_owned()),
        Just("NotOlderThan".to_owned()),
        Just("Strict".to_owned()),
        Just("-1".to_owned()),
        Just("99999999999999999999".to_owned()),
        Just("true".to_owned()),
    ];
    prop::collection::vec((name, value), 0..6).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    })
}

fn client_error(e: &ApiError) -> bool {
    (400..500).contains(&e.code())
}

fn headers(content_type: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_str(content_type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    headers
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn query_strings_parse_or_get_a_4xx(q in query()) {
        let Ok(uri) = format!("/api/v1/configmaps?{q}").parse::<Uri>() else {
            return Ok(());
        };
        let query = Query::parse(&uri);
        for result in [
            query.list_options().map(drop),
            query.watch_options().map(drop),
            query.write_options().map(drop),
            query.delete_options(None).map(drop),
            query.delete_options(Some(&serde_json::json!({"propagationPolicy": q}))).map(drop),
        ] {
            if let Err(e) = result {
                prop_assert!(client_error(&e), "{q}: {} {}", e.code(), e.message);
            }
        }
    }

    #[test]
    fn bodies_decode_or_get_a_4xx(bytes in prop::collection::vec(any::<u8>(), 0..200), text in ".{0,120}") {
        for content_type in ["application/json", "application/yaml", plinth_protobuf::MEDIA_TYPE, "text/plain", ""] {
            for body in [bytes.as_slice(), text.as_bytes(), &[b"k8s\0".as_slice(), bytes.as_slice()].concat()] {
                if let Err(e) = body::decode_body(&headers(content_type), body) {
                    prop_assert!(client_error(&e), "{content_type}: {}", e.message);
                }
            }
        }
    }

    #[test]
    fn patches_decode_or_get_a_4xx(bytes in prop::collection::vec(any::<u8>(), 0..200), text in ".{0,120}") {
        for content_type in [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
            "application/x-unknown",
        ] {
            for body in [bytes.as_slice(), text.as_bytes()] {
                if let Err(e) = body::decode_patch(&headers(content_type), body) {
                    prop_assert!(client_error(&e), "{content_type}: {}", e.message);
                }
            }
        }
    }
}
