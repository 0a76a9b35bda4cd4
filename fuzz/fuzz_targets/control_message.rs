//! A control-socket line, as any local user may send it: read as a request and as an answer
//! (what the clients read back), each Ok or a Malformed error, never a panic; what is read
//! writes back as a line that reads the same.
#![no_main]

use enforcer_common::protocol::{self, Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| {
    if let Ok(request) = protocol::from_line::<Request>(line) {
        let again: Request = protocol::from_line(&protocol::to_line(&request)).unwrap();
        assert_eq!(format!("{again:?}"), format!("{request:?}"));
    }
    let _ = protocol::from_line::<Response>(line);
});
