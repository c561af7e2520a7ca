# End-to-end tests of `cpulm serve` (tests/server_e2e.sh): curl-driven checks, then the
# official openai npm client (tests/openai_client_test.mjs), installed by the script into
# the build tree (skipped with a printed reason when npm cannot reach the registry).
# Servers listen on 127.0.0.1 with a free port; the script kills only the PIDs it started.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME server_e2e COMMAND ${CMAKE_SOURCE_DIR}/tests/server_e2e.sh $<TARGET_FILE:cpulm-cli>)
  # CPULM_TEST_SANITIZED=1 in the ASan build: fewer repeats of the same requests there
  if(CPULM_SANITIZE)
    set(cpulm_e2e_sanitized 1)
  else()
    set(cpulm_e2e_sanitized 0)
  endif()
  set_tests_properties(server_e2e PROPERTIES TIMEOUT 600 LABELS server
                       ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED};CPULM_NPM_DIR=${CMAKE_BINARY_DIR}/npm-openai;CPULM_TEST_SANITIZED=${cpulm_e2e_sanitized}")
endif()
# Issue #9 regressions (tests/server_security.sh): split delivery of the e2e requests, a
# 1,100-connection flood, per-client limits and head timeout, grace expiry, tokenization
# off the I/O thread.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME server_security COMMAND ${CMAKE_SOURCE_DIR}/tests/server_security.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(server_security PROPERTIES TIMEOUT 600 LABELS server
                       ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# `cpulm serve` with a hybrid model (tests/hybrid_server_test.sh, a synthetic tiny-qwen35
# file made by the script): prefix reuse, concurrency, streaming and n = 2 equal to fresh
# servers; the prompt cache turned off; idle trimming clearing whole sequences.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME hybrid_server COMMAND ${CMAKE_SOURCE_DIR}/tests/hybrid_server_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(hybrid_server PROPERTIES TIMEOUT 300 LABELS server SKIP_RETURN_CODE 77)
endif()
# `cpulm serve` with a gpt-oss model and the harmony template (tests/gptoss_server_test.sh,
# a synthetic tiny-gpt-oss file made by the script): reasoning_content and tool_calls,
# streamed and not, with curl and the official openai npm client.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME gptoss_server COMMAND ${CMAKE_SOURCE_DIR}/tests/gptoss_server_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(gptoss_server PROPERTIES TIMEOUT 300 LABELS server SKIP_RETURN_CODE 77
                       ENVIRONMENT "CPULM_NPM_DIR=${CMAKE_BINARY_DIR}/npm-openai")
endif()
# `cpulm serve` with encoder models (tests/encoder_server_test.py, synthetic tiny-bert and
# tiny-nomic-bert files made by the script): /v1/embeddings, /embedding, /api/embed and
# /tokenize against llama-server's references (tests/data/encoder-ref.json); /v1/rerank,
# /rerank, /reranking with a synthetic reranker on 20 query/document sets (llama-server's
# order and scores), top_n, return_text, TEI's shape; the refusals.
if(NOT CMAKE_CROSSCOMPILING AND CPULM_PYTHON3)
  add_test(NAME encoder_server COMMAND ${CPULM_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/encoder_server_test.py
           $<TARGET_FILE:cpulm-cli> ${CMAKE_SOURCE_DIR}/tests/data/encoder-ref.json)
  set_tests_properties(encoder_server PROPERTIES TIMEOUT 120 LABELS server)
endif()
# llama-server's documented curl examples (its README: /completion, /v1/chat/completions,
# /v1/embeddings, /v1/rerank; and the routes cpulm does not serve, refused with JSON errors)
# sent as written to `cpulm serve` on synthetic models (tests/llama_curl_examples.sh).
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME llama_curl_examples COMMAND ${CMAKE_SOURCE_DIR}/tests/llama_curl_examples.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(llama_curl_examples PROPERTIES TIMEOUT 120 LABELS server SKIP_RETURN_CODE 77)
endif()
