"""Pure. Bytes on every wire: OpenAI JSON, EngineCore/TokenSpeed msgpack, protobuf builders."""
