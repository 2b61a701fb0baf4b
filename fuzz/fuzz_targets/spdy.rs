//! SPDY/3.1 as `kubectl port-forward` and exec over SPDY send it to the node agent: frames,
//! and header blocks through the connection's zlib stream.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = plinth_net::spdy::read_connection(data);
});
