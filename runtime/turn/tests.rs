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

// Issue 36: `auto` is the provider's own tool search on the vendor's API
// only, Chat Completions never has it, and a refusal falls back to the
// local search only under `auto`, only for a 400, only before a native
// answer is in the conversation.
#[test]
fn the_providers_own_tool_search_is_used_where_it_exists() {
    let route = |provider, endpoint: &str, mode| {
        let mut r = ModelRoute::new(provider, endpoint, "m");
        r.tool_search = mode;
        r
    };
    let (a, n, l) = (ToolSearch::Auto, ToolSearch::Native, ToolSearch::Local);
    let responses = Provider::OpenAiResponses;
    assert!(route(responses, "https://api.openai.com/v1", a).native_search());
    assert!(route(Provider::Anthropic, "https://api.anthropic.com", a).native_search());
    assert!(!route(responses, "https://openrouter.ai/api/v1", a).native_search());
    assert!(!route(Provider::Anthropic, "http://127.0.0.1:8080", a).native_search());
    assert!(route(Provider::Anthropic, "http://127.0.0.1:8080", n).native_search());
    assert!(!route(responses, "https://api.openai.com/v1", l).native_search());
    assert!(!route(Provider::OpenAi, "https://api.openai.com/v1", n).native_search());
    let auto = route(responses, "https://api.openai.com/v1", a);
    let refusal = "Tool 'tool_search' is not supported with this model.";
    assert!(auto.search_refused(400, refusal, false));
    assert!(auto.search_refused(
        400,
        "tools.0.defer_loading: Extra inputs are not permitted",
        false
    ));
    assert!(!auto.search_refused(400, "prompt is too long", false));
    assert!(!auto.search_refused(400, refusal, true));
    assert!(!auto.search_refused(401, refusal, false));
    assert!(!route(responses, "https://api.openai.com/v1", n).search_refused(400, refusal, false));
    assert_eq!(ToolSearch::parse("native"), Some(n));
    assert_eq!(ToolSearch::parse("server"), None);
}
