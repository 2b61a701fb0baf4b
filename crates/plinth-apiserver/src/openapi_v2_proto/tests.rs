use super::*;
use serde_json::json;

#[test]
fn a_swagger_document_becomes_gnostics_message() {
    let swagger = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": {"/api/v1/namespaces/{namespace}/configmaps": {"post": {
            "operationId": "createConfigMap", "consumes": ["*/*"],
            "parameters": [{"name": "dryRun", "in": "query", "type": "string", "uniqueItems": true},
                           {"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/cm"}}],
            "responses": {"200": {"description": "OK", "schema": {"$ref": "#/definitions/cm"}}},
            "x-kubernetes-action": "post"}}},
        "definitions": {"cm": {"type": "object", "properties": {
            "data": {"type": "object", "additionalProperties": {"type": "string"}},
            "list": {"type": "array", "items": {"type": "integer", "enum": [1, 2]}}},
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}]}},
        "security": [{"BearerToken": []}],
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
    });
    let decoded = Document::decode(encode(&swagger).as_slice()).unwrap();
    assert_eq!(decoded.swagger, "2.0");
    let path = &decoded.paths.as_ref().unwrap().path[0];
    let post = path.value.as_ref().unwrap().post.as_ref().unwrap();
    assert_eq!(post.operation_id, "createConfigMap");
    assert_eq!(post.parameters.len(), 2);
    assert!(
        post.parameters[1]
            .parameter
            .as_ref()
            .unwrap()
            .body_parameter
            .is_some()
    );
    assert_eq!(
        post.vendor_extension[0].value.as_ref().unwrap().yaml,
        "post\n"
    );
    let cm = &decoded.definitions.as_ref().unwrap().additional_properties[0];
    let schema = cm.value.as_ref().unwrap();
    assert_eq!(schema.r#type.as_ref().unwrap().value, ["object"]);
    let data = &schema.properties.as_ref().unwrap().additional_properties[0];
    assert_eq!(data.name, "data");
    let list = &schema.properties.as_ref().unwrap().additional_properties[1];
    let items = &list.value.as_ref().unwrap().items.as_ref().unwrap().schema[0];
    assert_eq!(items.r#enum.len(), 2);
    assert_eq!(
        decoded.security_definitions.unwrap().additional_properties[0]
            .value
            .as_ref()
            .unwrap()
            .api_key_security
            .as_ref()
            .unwrap()
            .r#in,
        "header"
    );
}
