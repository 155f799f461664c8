use super::client::http_error_message;
use super::*;

#[test]
fn http_errors_keep_the_vendors_message() {
    assert_eq!(
        http_error_message(r#"{"error":{"message":"Rate limit reached","type":"rate_limit"}}"#),
        "Rate limit reached"
    );
    assert_eq!(
        http_error_message("<html>bad gateway</html>"),
        "<html>bad gateway</html>"
    );
    let e = TurnError::Http {
        status: 429,
        message: "slow down".into(),
        retry_after: Some(7),
    };
    assert_eq!(
        e.to_string(),
        "the model endpoint answered HTTP 429: slow down (retry after 7 s)"
    );
    assert!(
        TurnError::MaxRounds { rounds: 3 }
            .to_string()
            .contains("kept calling tools")
    );
}

#[test]
fn a_summary_is_one_short_line() {
    assert_eq!(summary("first\nsecond"), "first");
    assert!(summary(&"x".repeat(500)).len() < 300);
}
