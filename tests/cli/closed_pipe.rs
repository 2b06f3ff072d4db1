//! Output into a pipe whose reader has gone (`kdoctor crd | head -1`): the command ends quietly
//! with the status a shell gives a command killed by SIGPIPE, as kubectl does — no panic, no
//! error line.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};

use crate::support::repo;

/// Runs `kdoctor` with its standard output's reader closed at once; the exit code and stderr.
fn into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kdoctor"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kdoctor starts");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("kdoctor ends");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn crd_into_a_closed_pipe_ends_quietly() {
    // 260 KB of CRDs: more than a pipe holds, so a write fails even if one got in first.
    let (code, stderr) = into_closed_pipe(&["crd"]);
    assert_eq!(code, Some(141), "stderr: {stderr}");
    assert_eq!(stderr, "");
}

#[test]
fn a_probe_report_into_a_closed_pipe_ends_quietly() {
    // A keep-alive HTTP server answering every request with 200.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0
                        || stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .is_err()
                    {
                        break;
                    }
                }
            });
        }
    });
    // The report is printed after the run (0.3 s), long after the reader has gone.
    let (code, stderr) = into_closed_pipe(&[
        "probe",
        "http",
        &url,
        "--qps",
        "10",
        "--duration",
        "300ms",
        "-o",
        "json",
        "-q",
    ]);
    assert_eq!(code, Some(141), "stderr: {stderr}");
    assert_eq!(stderr, "");
}
