//! Kubernetes' protobuf: a `k8s\0` envelope and the message in it, decoded to an object;
//! what decodes is encoded again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(object) = plinth_protobuf::decode(data) {
        let _ = plinth_protobuf::encode_object(&object);
    }
});
