//! An offline job's inputs: any bytes are read line by line, each within the line limit, and
//! each line is an item or a rejected line with a reason, never a panic; the offsets add up to
//! the input's length, so a resumed job starts exactly where a line starts.
#![no_main]

use inference_worker::offline::job::{LineRead, max_line_bytes, parse_bytes, read_bounded};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let item_len = 4;
    // A small limit, so that the fuzzer reaches the too-long path quickly.
    let limit = max_line_bytes(item_len).min(256);
    let mut reader = std::io::BufReader::with_capacity(64, input);
    let mut line = Vec::new();
    let mut consumed = 0u64;
    loop {
        match read_bounded(&mut reader, &mut line, limit).unwrap() {
            LineRead::End => break,
            LineRead::Line { consumed: n } => {
                consumed += n;
                assert!(line.len() <= limit);
                if let Ok(item) = parse_bytes(&line, item_len) {
                    assert_eq!(item.data.len(), item_len);
                }
            }
            LineRead::TooLong { consumed: n } => consumed += n,
        }
    }
    assert_eq!(consumed, input.len() as u64);
});
